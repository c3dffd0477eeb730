"""One (backend, sequence length) point of the memory sweep, run in its own process.

    python -m sinkflex_lib.bench.worker SPEC.json RESULT.json

Builds a GptOssForCausalLM from the named config and runs training steps (forward, backward,
AdamW step; labels on every token), and writes a JSON result. The parent (`memory.run_memory_sweep`) starts it, watches its resident memory
and kills it when it passes the budget.

- CPU: the first step measures memory and is the warm-up. The process runs with glibc's mmap
  threshold fixed at 1 MiB (set by the parent), so a freed tensor leaves the resident set at
  once. Free heap pages are handed back (malloc_trim), the resident set is read as the
  baseline, VmHWM is reset to it (/proc/self/clear_refs), the step runs, and the peak is
  VmHWM - baseline: the kernel's exact high-water mark of what the step added on top of the
  resident model, libraries and inputs (its gradients, activations, the AdamW state it creates
  at its very end, and the attention's working set). Then the threshold goes to glibc's usual
  steady state (32 MiB), `warmup` more steps run, and `steps` steps are timed.
- CUDA: `warmup` steps, then `steps` steps each measured with torch.cuda.max_memory_allocated()
  after reset_peak_memory_stats() (absolute: weights, optimizer state and activations, as a
  GPU's peak VRAM is quoted) and max_memory_reserved(); the peak is the largest of them.
The step time is the median of the timed steps.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

from ..machine import choose_threads, cpu_model
from . import procmem

ATTN_IMPLEMENTATIONS = {"eager": "eager", "blocked": "sinkflex-blocked", "flex": "sinkflex-flex"}


class BudgetExceeded(RuntimeError):
    pass


def cpu_name() -> str:
    return f"CPU: {cpu_model()}, {os.cpu_count()} cores"


def with_index(device):
    """A CUDA device with its index ("cuda" is "cuda:0", the first visible GPU): torch.cuda's
    set_device and set_per_process_memory_fraction refuse a bare "cuda" (seen on an H200, torch
    2.11). Other devices as given."""
    import torch

    device = torch.device(device)
    return torch.device("cuda", 0) if device.type == "cuda" and device.index is None else device


def _set_up_device(spec: dict, result: dict, device, budget):
    """Pin the CUDA device and its memory fraction, or pick the CPU threads; names the device."""
    import torch

    if device.type == "cuda":
        result["device_name"] = f"CUDA: {torch.cuda.get_device_name(device)}"
        torch.cuda.set_device(device)
        if budget:
            total = torch.cuda.get_device_properties(device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total), device)
    else:
        choose_threads(spec.get("threads"))
        result["device_name"] = cpu_name() + f", torch threads {torch.get_num_threads()}"


def _measure_cuda(step, spec: dict, result: dict, device) -> None:
    """Warm-up steps, then each measured step's time and peak allocated memory."""
    import torch

    for _ in range(spec["warmup"]):
        step()
    for _ in range(spec["steps"]):
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        result["baseline"] = torch.cuda.memory_allocated(device)
        t0 = time.perf_counter()
        result["loss"] = step()
        torch.cuda.synchronize(device)
        result["step_times"].append(time.perf_counter() - t0)
        result["peaks"].append(torch.cuda.max_memory_allocated(device))
        result["reserved"] = max(result.get("reserved", 0), torch.cuda.max_memory_reserved(device))


def _measure_cpu(step, spec: dict, result: dict, check_budget) -> None:
    """The first step measured for memory (it is the warm-up too), then `warmup` untimed steps and
    `steps` timed ones at glibc's usual mmap threshold; the budget checked after each."""
    # The parent started this process with glibc's mmap threshold fixed at 1 MiB, so freed tensors
    # leave the resident set at once and VmHWM - baseline counts what the step holds, not what
    # malloc kept.
    check_budget()
    procmem.release_free_memory()
    result["baseline"] = base = procmem.rss_bytes()
    procmem.reset_peak()
    result["loss"] = step()
    result["peaks"].append(procmem.peak_rss_bytes() - base)
    check_budget()
    # Then time the steps with glibc's usual steady state (heap reuse below 32 MiB), so the
    # exact-memory setting does not add page faults to the step time.
    if spec.get("timing_mmap_threshold"):
        procmem.set_mmap_threshold(spec["timing_mmap_threshold"])
    for _ in range(spec["warmup"]):
        step()
        check_budget()
    for _ in range(spec["steps"]):
        t0 = time.perf_counter()
        result["loss"] = step()
        result["step_times"].append(time.perf_counter() - t0)
        check_budget()


def run_point(spec: dict) -> dict:
    import torch
    import transformers

    from ..models import build_gpt_oss, gpt_oss_config

    device = with_index(spec["device"])
    dtype = getattr(torch, spec["dtype"])
    budget = spec.get("budget_bytes")
    result = {"status": "ok", "pid": os.getpid(), "torch": torch.__version__,
              "transformers": transformers.__version__, "step_times": [], "peaks": []}
    _set_up_device(spec, result, device, budget)
    overrides = {"num_hidden_layers": spec["layers"]} if spec.get("layers") else {}
    config = gpt_oss_config(spec["config"], **overrides)
    process_peak = 0

    def check_budget():  # CPU: the kernel's high-water mark of the whole process
        nonlocal process_peak
        process_peak = max(process_peak, procmem.peak_rss_bytes())
        if budget and device.type == "cpu" and process_peak > budget:
            raise BudgetExceeded(f"process peak RSS {process_peak / 1e9:.2f} GB > budget {budget / 1e9:.2f} GB")

    try:
        model = build_gpt_oss(config, attn_implementation=ATTN_IMPLEMENTATIONS[spec["backend"]],
                              seed=spec.get("seed", 0), dtype=dtype, device=device)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=False)
        gen = torch.Generator().manual_seed(spec.get("seed", 0))
        ids = torch.randint(0, config.vocab_size, (spec["batch"], spec["seq"]), generator=gen).to(device)
        result["parameters"] = sum(p.numel() for p in model.parameters())

        def step():
            out = model(input_ids=ids, labels=ids, use_cache=False)  # labels on every token
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return float(out.loss.detach())

        if device.type == "cuda":
            _measure_cuda(step, spec, result, device)
        else:
            _measure_cpu(step, spec, result, check_budget)
    except BudgetExceeded as e:
        result.update(status="oom", note=str(e))
    except torch.OutOfMemoryError as e:
        result.update(status="oom", note=str(e).splitlines()[0][:200])
        if device.type == "cuda":
            result["peaks"].append(torch.cuda.max_memory_allocated(device))
    if device.type == "cpu":
        result["process_peak"] = max(process_peak, procmem.peak_rss_bytes())
    result["peak"] = max(result["peaks"]) if result["peaks"] else None
    result["step_s"] = statistics.median(result["step_times"]) if result["step_times"] else None
    return result


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m sinkflex_lib.bench.worker SPEC.json RESULT.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        spec = json.load(f)
    result = run_point(spec)
    with open(argv[1] + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(argv[1] + ".tmp", argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
