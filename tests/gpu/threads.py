"""Work started on several threads at once, each thread on a CUDA stream of its own."""

import threading

import torch


def on_streams(work, threads=8, device=None):
    """Call work(seed) for seeds 0 .. threads - 1, each on its own thread and on a new
    stream (of `device(seed)`, else of the current device), all released together;
    the calling thread then fails with every error the threads raised."""
    errors = []
    start = threading.Barrier(threads, timeout=120)

    def run(seed):
        try:
            with torch.cuda.device(device(seed) if device else torch.cuda.current_device()):
                stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                start.wait()
                work(seed)
            stream.synchronize()
        except Exception as error:  # reported by the calling thread
            errors.append(error)

    started = [threading.Thread(target=run, args=(seed,)) for seed in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    assert not errors, errors
