"""CUDA graph capture as torch.cuda.graph's documentation asks for it."""

import torch


def captured(step):
    """`step` run once on a side stream (lazy set-up happens outside the graph), then
    captured: the graph and the outputs its replays refresh."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # Captured on a stream of the current device: torch's default capture stream is
    # made once, on whichever device was current at the first capture.
    with torch.cuda.graph(graph, stream=side):
        outputs = step()
    return graph, outputs
