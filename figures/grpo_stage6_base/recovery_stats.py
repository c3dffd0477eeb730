"""Counts of a recovery-record file (python -m sinkflex_lib.rl.recovery): what the policy's slip
was (refused call, unparsed action, look-up that went through) and what the oracle did instead
(a look-up, a write, a message). python recovery_stats.py FILE.jsonl"""
import collections
import sys

from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.envs.actions import ParseError, ToolCall, parse_action
from sinkflex_lib.envs.oracle import oracle_script
from sinkflex_lib.envs.tools import WRITE_TOOLS
from sinkflex_lib.rl.chat import canonical_action
from sinkflex_lib.rl.evaluate import task_kind
from sinkflex_lib.rl.recovery import read_recoveries

rows, envs, table = read_recoveries(sys.argv[1]), {}, collections.Counter()
kinds = collections.Counter()
for r in rows:
    env = envs.setdefault(r["source"], RetailEnv(r["source"], max_steps=60))
    _, info = env.reset(seed=r["seed"], options={"task_id": r["task_id"]})
    script = oracle_script(info["task"], env.db.products)
    for a in script[:r["slip_at"]]:
        env.step(canonical_action(a))
    info = env.step(r["slip"])[4]
    slip = ("unparsed" if isinstance(info["action"], ParseError) else
            "refused call" if info["tool_error"] else "look-up that went through")
    want = parse_action(script[r["slip_at"]])
    instead = ("a write" if isinstance(want, ToolCall) and want.name in WRITE_TOOLS else
               "a look-up" if isinstance(want, ToolCall) else "a message")
    table[(slip, instead)] += 1
    kinds[task_kind(info["task"])] += 1
print(f"# What the policy's slips were ({sys.argv[1].split('/')[-1]})\n\nWritten by `recovery_stats.py`: "
      f"{len(rows)} records, {len({(r['source'], r['task_id']) for r in rows})} episodes, "
      f"{len({r['source'] for r in rows})} worlds\n")
print("| the policy's slip | the oracle's action instead | records |\n|---|---|---:|")
for (slip, instead), n in sorted(table.items(), key=lambda kv: -kv[1]):
    print(f"| {slip} | {instead} | {n} |")
print("\nper task kind: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
