r"""tau2's default reward for the retail domain: R = R_DB * R_COMMUNICATE, each 0 or 1.

- DB: replay the task's gold ``evaluation_criteria.actions`` on a fresh database, take the
  episode's database (the agent's calls replayed on another fresh copy), and compare tau2's
  canonical hashes: R_DB = 1 iff equal. Read calls and failing calls do not change the
  database, so only the net effect of the writes matters.
- COMMUNICATE: R_COMMUNICATE = 1 iff every ``communicate_info`` string s satisfies
  ``s.lower() in m.lower().replace(",", "")`` for some assistant message m (tau2 strips commas
  from the message); an empty list gives 1.
- An episode that did not end by the agent's or the user's stop (e.g. truncated at
  ``max_steps``) gets R = 0, as tau2 scores premature terminations.
"""

from __future__ import annotations

from typing import Iterable

from .data import RetailData
from .db import RetailDB
from .tools import WRITE_TOOLS, call_tool


def replay(data: RetailData, actions: Iterable[dict]) -> RetailDB:
    """A fresh episode database with `actions` ({"name", "arguments"}) applied in order."""
    db = data.db.episode()
    for a in actions:
        call_tool(db, a["name"], a.get("arguments") or {})
    return db


def gold_actions(task: dict) -> list[dict]:
    return list((task.get("evaluation_criteria") or {}).get("actions") or [])


def gold_writes(task: dict) -> list[dict]:
    """The gold actions of `task` that call a write tool, in order."""
    return [a for a in gold_actions(task) if a["name"] in WRITE_TOOLS]


def communicate_info(task: dict) -> list[str]:
    return list((task.get("evaluation_criteria") or {}).get("communicate_info") or [])


def gold_hash(data: RetailData, task: dict) -> str:
    """Hash of the database after the gold actions (cached per source and task)."""
    key = str(task["id"])
    if key not in data._gold_hash:
        data._gold_hash[key] = replay(data, gold_actions(task)).hash()
    return data._gold_hash[key]


def communicate_checks(info: list[str], assistant_messages: list[str]) -> list[dict]:
    """One {"info", "met"} per communicate_info string (tau2's substring rule)."""
    stripped = [m.lower().replace(",", "") for m in assistant_messages]
    return [{"info": s, "met": any(s.lower() in m for m in stripped)} for s in info]


def evaluate(data: RetailData, task: dict, db: RetailDB, assistant_messages: list[str],
             termination: str = "agent_stop") -> dict:
    """The reward and its breakdown for an episode that ended with `termination`.

    `termination` is "agent_stop", "user_stop" (normal ends) or anything else (reward 0).
    """
    g, a = gold_hash(data, task), db.hash()
    r_db = float(g == a)
    checks = communicate_checks(communicate_info(task), assistant_messages)
    r_comm = float(all(c["met"] for c in checks))
    normal = termination in ("agent_stop", "user_stop")
    return {
        "reward": r_db * r_comm if normal else 0.0,
        "termination": termination,
        "db": {"reward": r_db, "gold_hash": g, "agent_hash": a},
        "communicate": {"reward": r_comm, "checks": checks},
    }
