"""The seed's "Minimal client" (rpc.md), as a user would copy it: binary pipe reads split on LF
only, text deltas printed as they arrive, stop at agent_settled. The only changes: the command
line comes from argv (the binary under test and its model flags) and the prompt asks for a tool.

    python3 minimal_client.py <pi> [pi arguments...]
"""

import json
import subprocess
import sys

process = subprocess.Popen(
    [sys.argv[1], "--mode", "rpc", "--no-session", *sys.argv[2:]],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
)

assert process.stdin is not None
assert process.stdout is not None

command = {"id": "prompt-1", "type": "prompt", "message": "Run echo with the bash tool"}
process.stdin.write(json.dumps(command).encode("utf-8") + b"\n")
process.stdin.flush()

while line := process.stdout.readline():
    record = json.loads(line)
    if record.get("type") == "message_update":
        update = record["assistantMessageEvent"]
        if update["type"] == "text_delta":
            print(update["delta"], end="", flush=True)
    elif record.get("type") == "agent_settled":
        print()
        break

process.stdin.close()
sys.exit(process.wait())
