#!/usr/bin/env python3
"""Regenerates fixtures/sessions/*.jsonl with a reference pi (0.73.1, or 1.6.0 with --v1.6.0).

Throwaway tooling, used only by hand: starts a scripted OpenAI-compatible SSE server on
127.0.0.1, points an isolated agent dir's models.json at it, drives `pi --mode rpc` through a
conversation (tool call, naming, thinking change, compaction, fork) and copies the session files
it wrote into fixtures/sessions/. The Rust unit test in src/session/tests.rs reads them.

Usage: python3 tests/session_fixtures/generate.py   (from the repository root; needs the
reference installed by /work/shared/tools/reference-pi), or
python3 tests/session_fixtures/generate.py --v1.6.0   (pi 1.6.0 from
`bash tests/install_reference.sh --check 1.6.0`; writes reference-1.6.0-main.jsonl and
reference-1.6.0-fork.jsonl, which carry 1.6.0's system messages)
"""
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "fixtures", "sessions")
V160 = "--v1.6.0" in sys.argv
# 0.73.1's fixtures were made with the tool-call check first; kept so they regenerate the same.
SUMMARY_FIRST = V160


def sse_chunks(request):
    """What the mock model answers, chosen from the request's last message."""
    messages = request.get("messages", [])
    last = messages[-1] if messages else {}
    content = last.get("content")
    text = content if isinstance(content, str) else " ".join(
        part.get("text", "") for part in (content or []) if isinstance(part, dict))
    base = {"id": "chatcmpl-fixture", "object": "chat.completion.chunk", "created": 0, "model": "mock-1"}

    def chunk(delta, finish=None):
        return dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])

    usage = dict(base, choices=[], usage={"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15})
    # A summary request quotes the conversation, "use a tool" included: answer it first.
    if SUMMARY_FIRST and "summar" in json.dumps(messages[:1]).lower():
        reply = "## Goal\nFixture summary of the earlier conversation."
        return [chunk({"role": "assistant", "content": reply}), chunk({}, "stop"), usage]
    if last.get("role") == "user" and "use a tool" in text:
        call = {"index": 0, "id": "call_fixture_1", "type": "function",
                "function": {"name": "ls", "arguments": "{\"path\":\".\"}"}}
        return [chunk({"role": "assistant", "tool_calls": [call]}), chunk({}, "tool_calls"), usage]
    if last.get("role") == "tool":
        reply = "I listed the directory."
    elif "summar" in json.dumps(messages[:1]).lower() or "summar" in text.lower():
        reply = "## Goal\nFixture summary of the earlier conversation."
    else:
        reply = "echo: " + text.strip()[:60]
    return [chunk({"role": "assistant", "content": reply}), chunk({}, "stop"), usage]


class MockHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        chunks = sse_chunks(json.loads(body or b"{}"))
        payload = "".join("data: " + json.dumps(c) + "\n\n" for c in chunks) + "data: [DONE]\n\n"
        data = payload.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class Pi:
    def __init__(self, exe, agent_dir, session_dir, cwd):
        env = dict(os.environ, PI_CODING_AGENT_DIR=agent_dir, PI_OFFLINE="1", HOME=agent_dir)
        for key in list(env):
            if key.endswith("_PROXY") or key.endswith("_proxy"):
                del env[key]
        self.proc = subprocess.Popen(
            [exe, "--mode", "rpc", "--provider", "mock", "--model", "mock-1", "--session-dir", session_dir],
            cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sys.stderr)
        self.next_id = 0

    def command(self, record, wait_for_event=None):
        self.next_id += 1
        record = dict(record, id="c%d" % self.next_id)
        self.proc.stdin.write((json.dumps(record) + "\n").encode())
        self.proc.stdin.flush()
        response = None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("pi exited while waiting for %r" % record)
            message = json.loads(line)
            if message.get("type") == "response" and message.get("id") == record["id"]:
                if not message.get("success"):
                    raise RuntimeError("command failed: %r -> %r" % (record, message))
                response = message
                if wait_for_event is None:
                    return response
            elif wait_for_event and message.get("type") == wait_for_event and response is not None:
                return response

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def main():
    if V160:
        check = subprocess.check_output(
            ["bash", os.path.join(ROOT, "tests", "install_reference.sh"), "--check", "1.6.0"], text=True)
        exe = next(line[3:] for line in check.splitlines() if line.startswith("pi="))
    else:
        exe = subprocess.check_output(["/work/shared/tools/reference-pi"], text=True).strip()
    prefix = "reference-1.6.0-" if V160 else "reference-"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MockHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    with tempfile.TemporaryDirectory() as tmp:
        agent_dir = os.path.join(tmp, "agent")
        session_dir = os.path.join(tmp, "sessions")
        cwd = os.path.join(tmp, "work")
        for d in (agent_dir, session_dir, cwd):
            os.makedirs(d)
        with open(os.path.join(cwd, "a.txt"), "w") as f:
            f.write("fixture\n")
        models = {"providers": {"mock": {"baseUrl": "http://127.0.0.1:%d/v1" % port, "apiKey": "fixture-key",
                                         "api": "openai-completions", "models": [{"id": "mock-1"}]}}}
        with open(os.path.join(agent_dir, "models.json"), "w") as f:
            json.dump(models, f)
        # Keep almost nothing verbatim so /compact has something to summarize.
        with open(os.path.join(agent_dir, "settings.json"), "w") as f:
            json.dump({"compaction": {"keepRecentTokens": 1}}, f)

        pi = Pi(exe, agent_dir, session_dir, cwd)
        pi.command({"type": "prompt", "message": "hello there"}, "agent_end")
        pi.command({"type": "prompt", "message": "please use a tool"}, "agent_end")
        pi.command({"type": "set_session_name", "name": "  Fixture session  "})
        pi.command({"type": "set_thinking_level", "level": "high"})
        pi.command({"type": "prompt", "message": "third question"}, "agent_end")
        main_file = pi.command({"type": "get_state"})["data"]["sessionFile"]
        pi.command({"type": "compact"})
        pi.command({"type": "prompt", "message": "after compaction"}, "agent_end")
        forks = pi.command({"type": "get_fork_messages"})["data"]["messages"]
        second = next(m["entryId"] for m in forks if m["text"] == "please use a tool")
        pi.command({"type": "fork", "entryId": second})
        fork_file = pi.command({"type": "get_state"})["data"]["sessionFile"]
        pi.command({"type": "prompt", "message": "forked question"}, "agent_end")
        pi.close()

        os.makedirs(OUT, exist_ok=True)
        shutil.copyfile(main_file, os.path.join(OUT, prefix + "main.jsonl"))
        shutil.copyfile(fork_file, os.path.join(OUT, prefix + "fork.jsonl"))
    server.shutdown()
    print("wrote", os.path.join(OUT, prefix + "main.jsonl"), "and", prefix + "fork.jsonl")


if __name__ == "__main__":
    main()
