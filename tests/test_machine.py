"""`sinkflex_lib.machine`: how busy other processes keep the cores, and the thread count chosen from it
(the reference is a known load: processes this test starts, each holding one core); a backward pass
that repeats bit for bit (the reference: the same pass on one thread)."""

import os
import threading

import pytest
import torch

from sinkflex_lib.machine import (ThreadPicker, busy_cores_elsewhere, choose_threads, competing_processes,
                                  deterministic_backward, deterministic_on_cpu, usable_cores)
from sinkflex_lib.models import build_gpt_oss


@pytest.fixture(autouse=True)
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def quietest(probes: int = 3) -> float:
    """The least of a few probes: other work on a shared machine only ever adds busy cores."""
    return min(busy_cores_elsewhere() for _ in range(probes))


def test_usable_cores_are_cpus_of_this_machine():
    cores = usable_cores()
    assert cores and cores <= set(range(os.cpu_count()))


def test_competing_processes_run_while_the_block_runs():
    with competing_processes(2) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
    assert all(p.returncode is not None for p in procs)
    with pytest.raises(ValueError, match="compete must be >= 0"):
        with competing_processes(-1):
            pass


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="measured from /proc/stat (Linux)")
def test_one_competing_process_is_seen_as_one_busy_core():
    before = quietest()
    with competing_processes(1):
        during = quietest()
    assert 0.6 <= during - before <= 1.4, (before, during)


def test_this_process_own_threads_are_not_counted_as_busy_elsewhere():
    torch.set_num_threads(1)
    stop = threading.Event()

    def work():                                # torch releases the GIL: a second busy thread of ours
        a = torch.randn(256, 256)
        while not stop.is_set():
            a @ a

    worker = threading.Thread(target=work)
    worker.start()
    try:
        busy = quietest()
    finally:
        stop.set()
        worker.join()
    assert busy < 0.5, busy


def test_a_busy_core_takes_a_thread_away():
    cores = len(usable_cores())
    with competing_processes(1):
        picked = choose_threads(log=lambda m: None)
    assert 1 <= picked <= max(1, cores - 1) and torch.get_num_threads() == picked


def test_requested_threads_win_and_bad_ones_are_refused():
    assert choose_threads(1) == 1 and torch.get_num_threads() == 1
    with pytest.raises(ValueError, match="threads must be >= 1"):
        choose_threads(0)


def test_a_thread_count_set_in_the_environment_wins(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)                 # as torch reads OMP_NUM_THREADS at its start
    lines = []
    assert choose_threads(log=lines.append) == 1 and not lines


def test_a_long_run_sees_a_process_that_starts_after_it():
    cores, lines = len(usable_cores()), []
    picker, patient = ThreadPicker(log=lines.append, every_s=0.0), ThreadPicker(every_s=3600.0)
    first = picker.threads
    with competing_processes(1):
        now = picker()
        assert patient() == patient.threads           # not time to look again yet
    assert 1 <= now <= max(1, cores - 1) and torch.get_num_threads() == now
    assert (f"threads: {first} -> {now}" in lines[-1]) == (now != first)


def test_a_requested_count_is_kept():
    picker = ThreadPicker(1, every_s=0.0)
    with competing_processes(1):
        assert picker() == 1 and picker() == 1 and torch.get_num_threads() == 1


def gradients(model, ids: torch.Tensor) -> list[torch.Tensor]:
    """Every parameter's gradient of one next-token loss on `ids`, through `deterministic_backward`."""
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits[:, :-1]
    deterministic_backward(torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()))
    return [p.grad.clone() for p in model.parameters()]


def test_a_backward_pass_repeats_bit_for_bit_on_two_threads():
    """The experts' bias gather sums thousands of rows per expert in its backward: without the switch
    two threads add them in a racing order (the pass then differs between repeats)."""
    model = build_gpt_oss("tiny", seed=0)
    ids = torch.randint(0, model.config.vocab_size, (4, 512), generator=torch.Generator().manual_seed(0))
    torch.set_num_threads(1)
    one_thread = gradients(model, ids)
    torch.set_num_threads(2)
    repeats = [gradients(model, ids) for _ in range(6)]
    assert all(torch.equal(g, h) for r in repeats[1:] for g, h in zip(r, repeats[0]))
    assert all(torch.allclose(g, h, rtol=1e-5, atol=1e-7) for g, h in zip(repeats[0], one_thread))
    assert not torch.are_deterministic_algorithms_enabled()       # switched for the backward pass only


@pytest.mark.parametrize("already_on", [False, True])
def test_deterministic_on_cpu_switches_for_a_cpu_only_and_restores_the_setting(already_on):
    torch.use_deterministic_algorithms(already_on)
    try:
        with deterministic_on_cpu("cpu"):
            assert torch.are_deterministic_algorithms_enabled()
        assert torch.are_deterministic_algorithms_enabled() == already_on
        with deterministic_on_cpu(torch.device("cuda", 0)):     # a name only: no CUDA is needed
            assert torch.are_deterministic_algorithms_enabled() == already_on
        with pytest.raises(RuntimeError), deterministic_on_cpu("cpu"):
            raise RuntimeError("the setting comes back after an error too")
        assert torch.are_deterministic_algorithms_enabled() == already_on
    finally:
        torch.use_deterministic_algorithms(False)
