"""User simulators behind one protocol: a deterministic scripted user and an optional LLM user.

Protocol (:class:`UserSimulator`): ``start(task, seed) -> str`` resets the user for a task and
returns its first message; ``respond(agent_message) -> str`` answers one agent message. A
reply containing ``###STOP###`` ends the conversation.

The scripted user reads only ``user_scenario.instructions`` (never the gold actions) and
recognises the agent's message by keywords, checked in this order:
1. a transfer to a human (tau2's transfer sentence)          -> ``###STOP###``
2. "anything else" (the agent says the request is done)      -> thanks + ``###STOP###``
3. "confirm" together with "yes" (the listed action)         -> ``yes``
4. identity questions (email, zip, name, verify/authenticate) -> its ``known_info``, in first person
5. order-id questions                                         -> order ids its instructions name
6. anything else: restates the request; after ``patience`` such replies in a row it ends.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from typing import Callable, Protocol, runtime_checkable

from .actions import STOP_TOKEN
from .tools import TRANSFER_MESSAGE


@runtime_checkable
class UserSimulator(Protocol):
    def start(self, task: dict, seed: int | None = None) -> str: ...

    def respond(self, agent_message: str) -> str: ...


def instructions(task: dict) -> dict:
    return ((task.get("user_scenario") or {}).get("instructions") or {})


_VERBS = set("""want wants wish received receive have had has do did don't didn't would will can
could should need live lived go prefer like also just only ordered bought remember know think
recently moved are were expect plan believe feel intend insist decide decided agree
accept refuse hope may might must realize realized forgot purchased got then still already
used mention say ask get use tell change keep cancel return exchange find see""".split())
_SUBJECT_BEFORE = re.compile(
    r"(^|[.!?;:,(]\s*|\b(?:and|but|or|if|that|so|because|then|when|since|as|while|unless|"
    r"although|though|where|once|after|before)\s+)$", re.IGNORECASE)


def first_person(text: str) -> str:
    """Rewrite second-person task text ("You want ... your order") as the user's own words."""
    rules = [
        (r"\bYou are\b", "I am"), (r"\byou are\b", "I am"),
        (r"\bYou're\b", "I'm"), (r"\byou're\b", "I'm"),
        (r"\bYou've\b", "I've"), (r"\byou've\b", "I've"),
        (r"\bYou'd\b", "I'd"), (r"\byou'd\b", "I'd"),
        (r"\bYou'll\b", "I'll"), (r"\byou'll\b", "I'll"),
        (r"\bYou were\b", "I was"), (r"\byou were\b", "I was"),
        (r"\bYou name\b", "My name"),
        (r"\bYourself\b", "Myself"), (r"\byourself\b", "myself"),
        (r"\bYours\b", "Mine"), (r"\byours\b", "mine"),
        (r"\bYour\b", "My"), (r"\byour\b", "my"),
    ]
    for pat, rep in rules:
        text = re.sub(pat, rep, text)

    def you(m: re.Match) -> str:
        nxt = (m.group(2) or "").lower()
        if m.group(1) == "You" or nxt in _VERBS or _SUBJECT_BEFORE.search(m.string[:m.start()]):
            return "I"
        return "me"

    return re.sub(r"\b([Yy]ou)\b(?=(?:[^\w.!?]+([\w']+))?)", you, text)


class ScriptedUser:
    """Deterministic keyword-driven user (see module docstring); works on tau2 and mini tasks."""

    def __init__(self, patience: int = 5):
        self.patience = patience
        self._task: dict = {}
        self._idle = 0

    def start(self, task: dict, seed: int | None = None) -> str:
        self._task = task
        self._idle = 0
        reason = instructions(task).get("reason_for_call") or "I need help with my order."
        return "Hi! " + first_person(reason.strip())

    def _order_ids(self) -> list[str]:
        ins = instructions(self._task)
        text = " ".join(str(ins.get(k) or "") for k in ("reason_for_call", "task_instructions",
                                                         "known_info"))
        return list(dict.fromkeys(re.findall(r"#W\d+", text)))

    def respond(self, agent_message: str) -> str:
        m = agent_message.lower()
        ins = instructions(self._task)
        if TRANSFER_MESSAGE.lower() in m or "transferred to a human" in m:
            return STOP_TOKEN
        if "anything else" in m:
            return "No, that's all. Thank you! " + STOP_TOKEN
        if "confirm" in m and "yes" in m:
            self._idle = 0
            return "yes"
        if any(k in m for k in ("email", "zip", "your name", "authenticat", "verify", "identity")):
            self._idle = 0
            known = ins.get("known_info")
            return first_person(known.strip()) if known else "I'd rather not say."
        if "order id" in m or "which order" in m or "order number" in m:
            self._idle = 0
            ids = self._order_ids()
            if ids:
                return "The order id is " + " and ".join(ids) + "."
            return "I don't have the order id at hand."
        self._idle += 1
        if self._idle >= self.patience:
            return "I don't think we're getting anywhere. Goodbye. " + STOP_TOKEN
        return "Could you please help me with my request? " + first_person(
            (ins.get("reason_for_call") or "").strip())


USER_SYSTEM_PROMPT = """You are role-playing a customer who contacts an online retail store's support agent.
Stay in character and follow the scenario below. Write one short, natural message per turn.
Reveal facts from the scenario only when the agent needs them; never invent ids, names or
numbers that the scenario does not give you. When your request is fully handled, when you are
transferred to a human agent, or when nothing more can be done, reply with exactly {stop}.

Scenario:
{scenario}"""


class LLMUser:
    """A user played by any OpenAI-compatible chat-completions endpoint (optional; not in tests).

    Configure with arguments or the environment: ``SINKFLEX_USER_BASE_URL`` (e.g.
    ``http://localhost:8000/v1``), ``SINKFLEX_USER_MODEL``, ``SINKFLEX_USER_API_KEY``.
    `post` (url, headers, body) -> response dict can replace the HTTP call (for testing).
    """

    def __init__(self, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None, temperature: float = 0.0, timeout: float = 60.0,
                 post: Callable[[str, dict, dict], dict] | None = None):
        self.base_url = (base_url or os.environ.get("SINKFLEX_USER_BASE_URL") or "").rstrip("/")
        self.model = model or os.environ.get("SINKFLEX_USER_MODEL")
        self.api_key = api_key or os.environ.get("SINKFLEX_USER_API_KEY", "")
        if not self.base_url or not self.model:
            raise ValueError("LLMUser needs base_url and model (arguments, or SINKFLEX_USER_BASE_URL "
                             "and SINKFLEX_USER_MODEL in the environment)")
        self.temperature, self.timeout = temperature, timeout
        self._post = post or self._http_post
        self._messages: list[dict] = []
        self._seed: int | None = None

    def _http_post(self, url: str, headers: dict, body: dict) -> dict:
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read())

    def _complete(self) -> str:
        body = {"model": self.model, "messages": list(self._messages), "temperature": self.temperature}
        if self._seed is not None:
            body["seed"] = self._seed
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        out = self._post(f"{self.base_url}/chat/completions", headers, body)
        text = out["choices"][0]["message"].get("content") or ""
        self._messages.append({"role": "assistant", "content": text})
        return text

    def start(self, task: dict, seed: int | None = None) -> str:
        ins = instructions(task)
        scenario = "\n".join(f"{k}: {ins[k]}" for k in ("reason_for_call", "known_info",
                                                         "unknown_info", "task_instructions")
                             if ins.get(k))
        self._seed = seed
        self._messages = [
            {"role": "system", "content": USER_SYSTEM_PROMPT.format(stop=STOP_TOKEN, scenario=scenario)},
            {"role": "user", "content": "Hi! How can I help you today?"},
        ]
        return self._complete()

    def respond(self, agent_message: str) -> str:
        self._messages.append({"role": "user", "content": agent_message})
        return self._complete()


def make_user(user: str | UserSimulator) -> UserSimulator:
    """Build the user simulator named by `user` ("scripted", "llm") or pass an instance through."""
    if isinstance(user, str):
        if user == "scripted":
            return ScriptedUser()
        if user == "llm":
            return LLMUser()
        raise ValueError(f"user must be 'scripted', 'llm' or a UserSimulator, got {user!r}")
    if isinstance(user, UserSimulator):
        return user
    raise TypeError(f"user must be 'scripted', 'llm' or a UserSimulator, got {type(user).__name__}")
