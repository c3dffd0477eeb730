"""`make gpu-check`: every CUDA check behind one command, a short table printed last.

1. flex (compiled) against eager attention at gpt-oss-20b's head shape in bf16: error against
   float64 and forward+backward time, measured side by side;
2. the tests marked `cuda` (flex forward and backward against the blocked float64 reference);
3. the paper's setup (Harmony, LoRA, bf16, flex) at gpt-oss-20b's layer shape, two layers of
   random weights: the trainer's first GRPO step, then a forced update (`paper_setup_check`);
4. a short training-step memory sweep, eager against flex (`sinkflex_lib.bench`).

Each check runs in its own process group under a deadline: at most its own cap (`CHECKS`) and
what is left of the whole run's budget (`BUDGET_S`, 7.5 minutes, so the table comes within
`make gpu-check`'s 8); a check past its deadline is stopped with everything it started and
reported as TIME, a check with too little time left as SKIP, an exception as FAIL; each
check's line is printed as it ends. `--only` picks checks (e.g. the sweep alone). On an H200
(figures/gpu_check_h200, before the deadlines) the cuda tests took 218 s and an eight-point sweep
158 s, and the paper-setup check had not ended 2 minutes after them. Exits 2 without CUDA, 1 if
any check does not pass.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import traceback
import subprocess
import sys
import time
from pathlib import Path

import torch

from .paths import REPO_ROOT


def run_cuda_tests(out_dir: Path) -> tuple[str, str]:
    """The `cuda`-marked tests, with their 15 longest durations, written to out_dir/cuda_tests.log
    as they run (so a run stopped at its deadline leaves its log)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "cuda_tests.log"
    with open(log, "w") as f:
        code = subprocess.run([sys.executable, "-m", "pytest", "-q", "--durations=15", "-m", "cuda", "tests"],
                              cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    text = log.read_text()
    print(text[-4000:], flush=True)
    last = (text.strip().splitlines() or ["no output"])[-1]
    return ("pass" if code == 0 else "FAIL"), last


def _time(fn, repeats: int = 5) -> float:
    fn()  # warm-up (and compilation)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compare_flex_eager(n: int = 4096, window: int | None = 128) -> dict:
    """gpt-oss-20b attention shape (64 query heads, 8 KV heads, head dim 64), batch 1, bf16."""
    from .attention import sink_attention

    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(1, 64, n, 64, device="cuda", generator=g)
    k = torch.randn(1, 8, n, 64, device="cuda", generator=g)
    v = torch.randn(1, 8, n, 64, device="cuda", generator=g)
    sinks = torch.randn(64, device="cuda", generator=g)
    grad = torch.randn(1, 64, n, 64, device="cuda", generator=g)
    ref = sink_attention(q.double(), k.double(), v.double(), sinks.double(), window=window, backend="eager")

    def step(backend):
        ins = [t.bfloat16().requires_grad_() for t in (q, k, v, sinks)]
        out = sink_attention(*ins[:3], ins[3], window=window, backend=backend)
        out.backward(grad.bfloat16())
        return out

    out = {}
    for backend in ("eager", "flex"):
        torch.cuda.reset_peak_memory_stats()
        result = step(backend)
        out[f"{backend}_rel_err"] = ((result.double() - ref).abs().max() / ref.abs().max()).item()
        out[f"{backend}_s"] = _time(lambda: step(backend))
        out[f"{backend}_peak_gb"] = torch.cuda.max_memory_allocated() / 1e9
    return out


def memory_sweep_check(out_dir: Path, seqs=(2048, 4096, 8192)) -> tuple[str, str]:
    """eager against flex, gpt-oss-20b's attention shape x 2 layers, bf16, one subprocess per
    point. Passes when flex completes every length and peaks below eager at the longest length
    both complete."""
    from .bench import run_memory_sweep

    sweep = run_memory_sweep(["eager", "flex"], list(seqs), config="gpt-oss-20b", layers=2, batch=1,
                             dtype="bfloat16", device="cuda", warmup=1, steps=2, timeout_s=120, out=out_dir)
    print(sweep.to_markdown(), flush=True)
    flex_ok = all(p.status == "ok" for p in sweep.points if p.backend == "flex")
    both = [n for n in seqs if all(sweep.point(b, n).status == "ok" for b in ("eager", "flex"))]
    if not both:
        return ("pass" if flex_ok else "FAIL"), "eager completed no length"
    n = both[-1]
    e, f = sweep.point("eager", n), sweep.point("flex", n)
    ok = flex_ok and f.peak_gb < e.peak_gb
    return ("pass" if ok else "FAIL"), (f"at {n}: flex {f.peak_gb:.2f} GB vs eager {e.peak_gb:.2f} GB, "
                                        f"step x{e.step_s / f.step_s:.2f}; eager statuses "
                                        + ",".join(sweep.point("eager", m).status for m in seqs))


def paper_setup_check(out_dir: Path, preset: str = "gpt-oss-20b", layers: int = 2, group_size: int = 4,
                      device: str = "cuda") -> tuple[str, str]:
    """The gpu profile's paper setup (`rl.config.paper_setup`: Harmony, LoRA rank 32, bf16, the
    sinkflex attention, flex on CUDA) from a local directory shaped like the model preset cut to
    `layers` layers (random bf16 weights, the real 201,088-id vocabulary; a temporary folder):
    the trainer's first GRPO step on tau2's train split (``TAU2_DATA_DIR``; else the synthetic
    training world), then `forced_update`. Passes when the update's recomputed log-probs of the
    sampled tokens match the sampling ones (mean |gap| under 0.05 nats in bf16) and it moves every
    adapter and no base weight. Numbers go to out_dir/paper_setup.json."""
    from .rl.config import TrainConfig
    from .rl.policy import write_gpt_oss_dir
    from .rl.runstate import read_metrics
    from .rl.train import train

    synthetic = {} if os.environ.get("TAU2_DATA_DIR") else dict(source="train-world:1000", val_source="eval-world:0")
    with tempfile.TemporaryDirectory() as tmp:
        folder, run_dir = Path(tmp) / "gpt-oss", Path(tmp) / "run"
        write_gpt_oss_dir(folder, preset, dtype=torch.bfloat16, device=device, num_hidden_layers=layers)
        cfg = TrainConfig.from_profile("gpu", policy_dir=str(folder), steps=1, groups_per_step=1, group_size=group_size,
                                       minibatch_size=group_size, max_turns=3, max_new_tokens=64, max_tokens=4096,
                                       val_split=None, val_tasks=2, **synthetic)
        policy = train(cfg, run_dir, device=device, log=lambda line: print(line, flush=True)).policy
        step = next(r for r in read_metrics(run_dir) if r["kind"] == "train")
    f = forced_update(policy, cfg, step["tasks"][0], group_size, device)
    result = {"preset": preset, "layers": layers, "device": device, "tau2": not synthetic, "forced_update": f,
              "step": {k: step[k] for k in ("step_s", "rollout_s", "update_s", "peak_mem_gb", "response_length",
                                            "tokens_per_s")}}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "paper_setup.json").write_text(json.dumps(result, indent=1))
    ok = f["logp_gap_mean"] < 0.05 and 0 < f["adapters_moved"] == f["adapters"] and f["base_moved"] == 0
    return ("pass" if ok else "FAIL"), (f"{'synthetic' if synthetic else 'tau2'} step {step['step_s']:.1f} s, "
                                        f"peak {step['peak_mem_gb']:.1f} GB; forced update: |logp gap| "
                                        f"{f['logp_gap_mean']:.4f}, adapters moved {f['adapters_moved']}/"
                                        f"{f['adapters']}, base {f['base_moved']}")


def forced_update(policy, cfg, task_id: str, group_size: int, device: str) -> dict:
    """One group of `task_id` rolled out and updated by `grpo_update` with its rewards set to
    1, 0, 1, 0, ... (random weights solve nothing, so a trainer's own groups have no reward spread):
    the mean |recomputed - sampling| log-prob of the sampled tokens, the adapters and base weights
    the update moved, its peak memory and loss."""
    import numpy as np

    from .machine import peak_memory_gb
    from .rl.rollout import collate, group_specs, rollout_batch, scores_without_pads, token_logprobs, without_pads
    from .rl.train import grpo_update

    rollouts = rollout_batch(policy, group_specs([task_id], group_size, [1]), cfg.rollout_config(),
                             torch.Generator().manual_seed(1), {})
    for i, r in enumerate(rollouts):
        r.reward = float((i + 1) % 2)
    scored = [without_pads(r) for r in rollouts] if scores_without_pads(policy.model) else rollouts
    batch = collate(scored, policy.pad_id)
    with torch.no_grad():
        logp = token_logprobs(policy.model, batch, cfg.temperature)[0].cpu()
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    opt = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=cfg.lr)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    upd = grpo_update(policy, opt, rollouts, cfg, np.random.default_rng(0))
    moved = {n: not torch.equal(p.detach(), before[n]) for n, p in policy.model.named_parameters()}
    adapters = [n for n in moved if "lora_" in n]
    return {"logp_gap_mean": (logp - batch["old_logp"])[batch["mask"] > 0].abs().mean().item(),
            "tokens": int(batch["mask"].sum()), "peak_gb": peak_memory_gb(device),
            "adapters_moved": sum(moved[n] for n in adapters), "adapters": len(adapters),
            "base_moved": sum(v for n, v in moved.items() if "lora_" not in n),
            **{k: upd[k] for k in ("policy_loss", "ratio_mean") if k in upd}}


def flex_eager_check(out_dir: Path | None = None) -> tuple[str, str]:
    r = compare_flex_eager()
    return ("pass" if r["flex_rel_err"] < 2e-2 else "FAIL"), (
        f"rel err flex {r['flex_rel_err']:.1e} eager {r['eager_rel_err']:.1e}; "
        f"fwd+bwd {r['flex_s'] * 1e3:.1f} ms vs {r['eager_s'] * 1e3:.1f} ms "
        f"(x{r['eager_s'] / r['flex_s']:.2f}); peak {r['flex_peak_gb']:.2f} vs {r['eager_peak_gb']:.2f} GB")


# key: (title, the most seconds it may take, check(out_dir) -> (status, detail)), in the order run
CHECKS = {
    "flex": ("flex vs eager, N=4096 bf16", 90, flex_eager_check),
    "tests": ("cuda tests", 240, run_cuda_tests),
    "paper": ("paper setup, 2 layers of 20b", 150, paper_setup_check),
    "sweep": ("memory sweep eager/flex", 150, memory_sweep_check),
}
BUDGET_S = 450.0      # the whole run: the table within make gpu-check's 8 minutes
MIN_CHECK_S = 30.0    # a check with less time left than this is skipped, not started


def _guarded(check) -> tuple[str, str]:
    """A check's (status, detail), printed as it ends; an exception fails that check alone."""
    try:
        status, detail = check()
    except Exception as e:  # noqa: BLE001 - every check runs, the table reports each
        traceback.print_exc()
        status, detail = "FAIL", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    print(f"-> {status}: {detail}", flush=True)
    return status, detail


def run_in_group(cmd: list[str], timeout_s: float) -> int | None:
    """Run `cmd` in a new process group; past `timeout_s` kill the whole group (the check's own
    subprocesses too). Its exit code, or None when it was stopped."""
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def run_check_process(key: str, out_dir: Path, timeout_s: float) -> tuple[str, str]:
    """One check in a child process (``--child KEY``) under `timeout_s`; its (status, detail)."""
    result = out_dir / f"{key}.result.json"
    result.unlink(missing_ok=True)
    start = time.monotonic()
    code = run_in_group([sys.executable, "-m", "sinkflex_lib.gpu_check", "--child", key, "--out", str(out_dir)],
                        timeout_s)
    if code is None:
        return "TIME", f"stopped at its deadline, {time.monotonic() - start:.0f} s"
    if not result.is_file():
        return "FAIL", f"the check's process exited {code} with no result"
    return tuple(json.loads(result.read_text()))


def run_checks(keys: list[str], out_dir: Path, budget_s: float = BUDGET_S,
               run=run_check_process) -> list[tuple[str, str, str]]:
    """(title, status, detail) of each check of `keys`, in order, each under min(its cap, what is
    left of `budget_s`); SKIP once less than MIN_CHECK_S is left."""
    deadline, rows = time.monotonic() + budget_s, []
    for key in keys:
        title, cap, _ = CHECKS[key]
        left = deadline - time.monotonic()
        if left < MIN_CHECK_S:
            rows.append((title, "SKIP", f"{max(left, 0):.0f} s of the {budget_s:.0f} s budget left"))
            continue
        print(f"== {title} (at most {min(cap, left):.0f} s)", flush=True)
        status, detail = run(key, out_dir, min(cap, left))
        if status == "TIME":
            print(f"-> {status}: {detail}", flush=True)
        rows.append((title, status, detail))
    return rows


def table(rows: list[tuple[str, str, str]]) -> str:
    width = max(len(title) for title, *_ in rows)
    lines = ["check".ljust(width) + " | status | detail", "-" * width + "-+--------+-------"]
    return "\n".join(lines + [f"{t.ljust(width)} | {st.ljust(6)} | {d}" for t, st, d in rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Every CUDA check of sinkflex-rl")
    parser.add_argument("--out", default=str(REPO_ROOT / "runs" / "gpu_check"))
    parser.add_argument("--only", default=",".join(CHECKS), help=f"checks to run, in order: {','.join(CHECKS)}")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S)
    parser.add_argument("--child", choices=list(CHECKS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.child:   # one check, in the process run_check_process started
        status, detail = _guarded(lambda: CHECKS[args.child][2](out))
        (out / f"{args.child}.result.json").write_text(json.dumps([status, detail]))
        return 0
    keys = [k for k in args.only.split(",") if k]
    unknown = [k for k in keys if k not in CHECKS]
    if unknown:
        parser.error(f"unknown check(s) {unknown}; choose from {','.join(CHECKS)}")
    if not torch.cuda.is_available():
        print("gpu-check: no CUDA device here; run it on a GPU machine (make gpu-check).")
        return 2
    print(f"gpu-check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    rows = run_checks(keys, out, args.budget_s)
    print("\n" + table(rows))
    return 0 if all(status == "pass" for _, status, _ in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
