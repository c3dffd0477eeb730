"""`make gpu-check`: every CUDA check behind one command, a short table printed last.

1. the tests marked `cuda` (flex forward and backward against the blocked float64 reference);
2. flex (compiled) against eager attention at gpt-oss-20b's head shape in bf16: error against
   float64 and forward+backward time, measured side by side;
3. a short training-step memory sweep, eager against flex (`sinkflex_lib.bench`);
4. the paper's setup (Harmony, LoRA, bf16, flex) at gpt-oss-20b's layer shape, two layers of
   random weights: the trainer's first GRPO step, then a forced update (`paper_setup_check`).

Each check's line is printed as it ends; an exception fails that check alone. On an H200
(figures/gpu_check_h200) checks 1-3 took over 6 minutes (tests 218 s, sweep 158 s), and check
4 had not ended 2 minutes later. Exits 2 without CUDA, 1 if any check fails.
"""

from __future__ import annotations

import argparse
import json
import os
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
    """The `cuda`-marked tests, with their 15 longest durations; the whole output goes to
    out_dir/cuda_tests.log."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "--durations=15", "-m", "cuda", "tests"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "cuda_tests.log").write_text(proc.stdout + "\n" + proc.stderr)
    print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n", flush=True)
    last = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    return ("pass" if proc.returncode == 0 else "FAIL"), last


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
                             dtype="bfloat16", device="cuda", warmup=1, steps=2, timeout_s=600, out=out_dir)
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


def flex_eager_check() -> tuple[str, str]:
    r = compare_flex_eager()
    return ("pass" if r["flex_rel_err"] < 2e-2 else "FAIL"), (
        f"rel err flex {r['flex_rel_err']:.1e} eager {r['eager_rel_err']:.1e}; "
        f"fwd+bwd {r['flex_s'] * 1e3:.1f} ms vs {r['eager_s'] * 1e3:.1f} ms "
        f"(x{r['eager_s'] / r['flex_s']:.2f}); peak {r['flex_peak_gb']:.2f} vs {r['eager_peak_gb']:.2f} GB")


def _guarded(check) -> tuple[str, str]:
    """A check's (status, detail), printed as it ends; an exception fails that check alone."""
    try:
        status, detail = check()
    except Exception as e:  # noqa: BLE001 - every check runs, the table reports each
        traceback.print_exc()
        status, detail = "FAIL", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    torch.cuda.empty_cache()
    print(f"-> {status}: {detail}", flush=True)
    return status, detail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Every CUDA check of sinkflex-rl")
    parser.add_argument("--out", default=str(REPO_ROOT / "runs" / "gpu_check"))
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--skip-paper-setup", action="store_true")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu-check: no CUDA device here; run it on a GPU machine (make gpu-check).")
        return 2
    print(f"gpu-check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    out = Path(args.out)
    checks = [("cuda tests", lambda: run_cuda_tests(out)), ("flex vs eager, N=4096 bf16", flex_eager_check)]
    if not args.skip_sweep:
        checks.append(("memory sweep eager/flex", lambda: memory_sweep_check(out)))
    if not args.skip_paper_setup:
        checks.append(("paper setup, 2 layers of 20b", lambda: paper_setup_check(out)))
    rows = [(name, *_guarded(check)) for name, check in checks]
    width = max(len(name) for name, *_ in rows)
    print("\n" + "check".ljust(width) + " | status | detail")
    print("-" * width + "-+--------+-------")
    for name, status, detail in rows:
        print(f"{name.ljust(width)} | {status.ljust(6)} | {detail}")
    return 0 if all(status == "pass" for _, status, _ in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
