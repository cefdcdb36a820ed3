#!/usr/bin/env bash
# Regenerates fixtures/models/* from pi 1.6.0 itself (run from the repository root):
#   bash tests/gen_model_fixtures.sh
# - available_two_keys.json: get_available_models' `data.models` with ANTHROPIC_API_KEY and
#   RADIUS_API_KEY set (every field of each model, as 1.6.0 sends it);
# - available_all_keys.tsv: with a key for every provider (Cloudflare's account and gateway ids,
#   a Codex login, ambient AWS and Vertex credentials): provider, id, contextWindow, maxTokens and
#   the cost object (compact JSON, keys sorted) of each model, in 1.6.0's order;
# - default_per_key.tsv: for each key variable set alone, the model 1.6.0 starts with (get_state).
# Every run is isolated (a temporary HOME and agent dir, PI_OFFLINE=1), nothing reaches the network.
set -euo pipefail
eval "$(bash tests/install_reference.sh --check 1.6.0 | grep '^pi=')"
out=fixtures/models
mkdir -p "$out"
keys=(ANTHROPIC_API_KEY ANTHROPIC_OAUTH_TOKEN ANT_LING_API_KEY QWEN_TOKEN_PLAN_TEAM_API_KEY
  QWEN_TOKEN_PLAN_API_KEY QWEN_TOKEN_PLAN_TEAM_CN_API_KEY QWEN_TOKEN_PLAN_CN_API_KEY
  QWEN_TOKEN_PLAN_INDIVIDUAL_API_KEY QWEN_TOKEN_PLAN_INDIVIDUAL_CN_API_KEY OPENAI_API_KEY
  AZURE_OPENAI_API_KEY NVIDIA_API_KEY DEEPSEEK_API_KEY GEMINI_API_KEY GOOGLE_CLOUD_API_KEY
  GROQ_API_KEY CEREBRAS_API_KEY XAI_API_KEY TYPESAFE_API_KEY RADIUS_API_KEY OPENROUTER_API_KEY
  AI_GATEWAY_API_KEY ZAI_API_KEY ZAI_CODING_CN_API_KEY MISTRAL_API_KEY MINIMAX_API_KEY
  MINIMAX_CN_API_KEY MOONSHOT_API_KEY HF_TOKEN FIREWORKS_API_KEY TOGETHER_API_KEY BASETEN_API_KEY
  OPENCODE_API_KEY KIMI_API_KEY META_API_KEY CLOUDFLARE_API_KEY XIAOMI_API_KEY
  XIAOMI_TOKEN_PLAN_CN_API_KEY XIAOMI_TOKEN_PLAN_AMS_API_KEY XIAOMI_TOKEN_PLAN_SGP_API_KEY
  COPILOT_GITHUB_TOKEN)

# Runs 1.6.0 in RPC mode with a fresh HOME and the given VAR=value pairs; prints the response data
# of `command`.
rpc() {
  local command=$1; shift
  local home; home=$(mktemp -d)
  mkdir -p "$home/agent"
  if [ -n "${AUTH_JSON:-}" ]; then printf '%s' "$AUTH_JSON" > "$home/agent/auth.json"; fi
  if [ -n "${ADC:-}" ]; then
    mkdir -p "$home/.config/gcloud"
    echo '{"type":"authorized_user","client_id":"a","client_secret":"b","refresh_token":"c"}' \
      > "$home/.config/gcloud/application_default_credentials.json"
  fi
  echo "{\"type\":\"$command\",\"id\":\"1\"}" \
    | env -i PATH="$PATH" HOME="$home" PI_CODING_AGENT_DIR="$home/agent" PI_OFFLINE=1 "$@" \
      timeout 60 "$pi" --mode rpc --no-session 2>/dev/null \
    | python3 -c 'import json,sys
for line in sys.stdin:
    r = json.loads(line)
    if r.get("type") == "response":
        print(json.dumps(r.get("data"))); break'
  rm -rf "$home"
}

rpc get_available_models ANTHROPIC_API_KEY=k RADIUS_API_KEY=k \
  | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["models"], indent=1))' \
  > "$out/available_two_keys.json"

all=()
for k in "${keys[@]}"; do all+=("$k=k"); done
AUTH_JSON='{"openai-codex":{"type":"oauth","access":"a","refresh":"r","expires":9999999999999,"accountId":"acc"}}' \
ADC=1 rpc get_available_models "${all[@]}" CLOUDFLARE_ACCOUNT_ID=acc CLOUDFLARE_GATEWAY_ID=gw \
  AWS_ACCESS_KEY_ID=a AWS_SECRET_ACCESS_KEY=b GOOGLE_CLOUD_PROJECT=p GOOGLE_CLOUD_LOCATION=l \
  | python3 -c 'import json,sys
for m in json.load(sys.stdin)["models"]:
    print("\t".join([m["provider"], m["id"], str(m["contextWindow"]), str(m["maxTokens"]),
                     json.dumps(m["cost"], sort_keys=True, separators=(",", ":"))]))' \
  > "$out/available_all_keys.tsv"

: > "$out/default_per_key.tsv"
for k in "${keys[@]}"; do
  rpc get_state "$k=k" | python3 -c 'import json,sys
m = json.load(sys.stdin).get("model") or {}
print("\t".join([sys.argv[1], m.get("provider", "-"), m.get("id", "-")]))' "$k" >> "$out/default_per_key.tsv"
done
