"""Scratch (session 39): does one backward pass of the base repeat on two threads? python backward_race_probe.py
30 identical forward+backward passes of base-tiny on 4 x 1,024 random tokens, two threads, with plain
`loss.backward()` and with `machine.deterministic_backward`, on a quiet machine and beside two busy
single-thread processes (`machine.competing_processes`); per series: distinct gradient hashes (all
parameters), the parameters whose gradient ever differs from the first pass's, the median backward time;
and the one-thread pass's hash as the reference."""
import hashlib, time
import torch
from sinkflex_lib.machine import competing_processes, deterministic_backward
from sinkflex_lib.rl.policy import build_policy

model = build_policy("base-tiny").model
V = model.config.vocab_size
ids = torch.randint(0, V, (4, 1024), generator=torch.Generator().manual_seed(0))


def one_pass(backward) -> tuple[str, dict, float]:
    model.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(input_ids=ids).logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    t = time.perf_counter()
    backward(loss)
    dt = time.perf_counter() - t
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    h = hashlib.sha256(b"".join(g.numpy().tobytes() for g in grads.values())).hexdigest()[:10]
    return h, grads, dt


def series(label: str, backward, n: int = 30) -> None:
    runs = [one_pass(backward) for _ in range(n)]
    first = runs[0][1]
    differ = sorted({k for _, g, _ in runs for k in g if not torch.equal(g[k], first[k])})
    print(f"{label}: {len({h for h, _, _ in runs})} distinct of {n} ({sorted({h for h, _, _ in runs})[:3]}...), "
          f"differing parameters {differ}, backward median {sorted(d for _, _, d in runs)[n // 2] * 1e3:.0f} ms", flush=True)


torch.set_num_threads(1)
print("one thread, reference hash:", one_pass(deterministic_backward)[0], flush=True)
torch.set_num_threads(2)
plain = lambda loss: loss.backward()
for load in (0, 2):
    with competing_processes(load):
        for label, fn in (("plain", plain), ("deterministic_backward", deterministic_backward)):
            series(f"two threads, {load} busy processes beside, {label}", fn)
