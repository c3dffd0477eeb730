"""Import side effects: only the two the package docstring lists."""

import json
import subprocess
import sys

PROBE = """
import json, gymnasium
from transformers import AttentionInterface
seen = {}
import sinkflex_lib, sinkflex_lib.attention, sinkflex_lib.models, sinkflex_lib.rl, sinkflex_lib.bench
seen["plain"] = ["sinkflex" in AttentionInterface._global_mapping, "sinkflex/Retail-v0" in gymnasium.registry]
import sinkflex_lib.envs
seen["envs"] = ["sinkflex" in AttentionInterface._global_mapping, "sinkflex/Retail-v0" in gymnasium.registry]
import sinkflex_lib.integrations.trl
seen["trl"] = ["sinkflex" in AttentionInterface._global_mapping, "sinkflex/Retail-v0" in gymnasium.registry]
print(json.dumps(seen))
"""


def test_only_envs_and_trl_register_on_import():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen == {"plain": [False, False], "envs": [False, True], "trl": [True, True]}
