"""Device time of the calls that issue 27's build cuts changed, for the installed wheel,
so that two wheels (before and after) compare in separate processes on one GPU:

- comparisons and bitwise ops, one kernel per family now (the operation a runtime
  argument): 64M elements of 1-, 2- and 4-byte dtypes, a tensor or a number as `other`,
  and a broadcast row;
- attention without a mask, which runs the causal kernel now (the diagonal past the last
  key), and on layouts its aligned kernels do not take (a query one element off 16-byte
  alignment, a strided head dim), which the 64-bit kernel serves now: decode steps of 1
  and 8 over 4096 keys and a prefill of 2048 (causal too), GQA 32 over 8 heads,
  head_dim 128.

CUDA events around back-to-back calls, median of repeats. `--json` writes the figures;
`--compare A.json B.json` prints B / A per case (above 1: B slower).
"""

import argparse
import json
import pathlib
import statistics

import torch

F = torch.nn.functional


def device_us(cases, iterations=20, repeats=9):
    for function in cases.values():
        function()
    samples = {name: [] for name in cases}
    for _ in range(repeats):
        for name, function in cases.items():
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(iterations):
                function()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) * 1e3 / iterations)
    return {name: statistics.median(values) for name, values in samples.items()}


def _misaligned(shape, dtype):
    """A contiguous tensor whose data starts one element past 16-byte alignment."""
    count = 1
    for size in shape:
        count *= size
    return torch.randn(count + 1, device="cuda").to(dtype)[1:].view(shape)


def cases(nt):
    found = {}
    n = 1 << 26
    for dtype in (torch.float16, torch.float32, torch.uint8, torch.bool):
        if dtype.is_floating_point:
            x, y = (torch.randn(n, device="cuda", dtype=dtype) for _ in range(2))
        else:
            x, y = (torch.randint(0, 2, (n,), device="cuda").to(dtype) for _ in range(2))
        out = torch.empty(n, device="cuda", dtype=torch.bool)
        name = str(dtype).removeprefix("torch.")
        for function in ("eq", "lt", "ge"):
            call = getattr(nt, function)
            reference = getattr(torch, function)
            assert torch.equal(call(x, y), reference(x, y)), (function, name)
            found[f"{function} {name}"] = lambda c=call, x=x, y=y, o=out: c(x, y, out=o)
        scalar = True if dtype == torch.bool else 1
        found[f"ne {name} scalar"] = lambda x=x, s=scalar, o=out: nt.ne(x, s, out=o)
        rows = x.view(8192, -1)
        found[f"gt {name} row"] = lambda r=rows, o=out: nt.gt(r, r[0], out=o.view(r.shape))
        if not dtype.is_floating_point:
            same = torch.empty_like(x)
            assert torch.equal(nt.bitwise_and(x, y), torch.bitwise_and(x, y))
            found[f"bitwise_and {name}"] = lambda x=x, y=y, o=same: nt.bitwise_and(x, y, out=o)
            found[f"bitwise_or {name}"] = lambda x=x, y=y, o=same: nt.bitwise_or(x, y, out=o)

    sdpa = nt.scaled_dot_product_attention
    shapes = {"decode b1": (1, 1, 4096), "decode b8": (8, 1, 4096), "prefill": (1, 2048, 2048)}
    for dtype in (torch.float16, torch.float32):
        name = str(dtype).removeprefix("torch.")
        for label, (batch, seq_q, seq_kv) in shapes.items():
            key, value = (
                torch.randn(batch, 8, seq_kv, 128, device="cuda", dtype=dtype) for _ in range(2)
            )
            queries = {
                "plain": torch.randn(batch, 32, seq_q, 128, device="cuda", dtype=dtype),
                "misaligned": _misaligned((batch, 32, seq_q, 128), dtype),
                "strided": torch.randn(batch, 32, seq_q, 256, device="cuda", dtype=dtype)[..., ::2],
            }
            for layout, query in queries.items():
                for causal in (False, True) if label == "prefill" else (False,):
                    got = sdpa(query, key, value, is_causal=causal, enable_gqa=True)
                    # torch's math backend: its fused ones fail on the misaligned query
                    # (cuDNN: a misaligned address at decode; a wrong result at prefill).
                    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                        expected = F.scaled_dot_product_attention(
                            query, key, value, is_causal=causal, enable_gqa=True
                        )
                    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
                    case = f"sdpa {name} {label} {layout}{' causal' if causal else ''}"
                    found[case] = lambda q=query, k=key, v=value, c=causal: sdpa(
                        q, k, v, is_causal=c, enable_gqa=True
                    )
    return found


def compare(before, after):
    first, second = (json.loads(pathlib.Path(path).read_text()) for path in (before, after))
    print(f"{'case':36s} {'A us':>9s} {'B us':>9s} {'B/A':>6s}")
    for name, us in first["cases"].items():
        if name in second["cases"]:
            them = second["cases"][name]
            print(f"{name:36s} {us:9.1f} {them:9.1f} {them / us:6.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="two --json files")
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    import ntops_prebuilt as nt

    report = {"device": torch.cuda.get_device_name(), "cases": device_us(cases(nt))}
    for name, us in report["cases"].items():
        print(f"{name:36s} {us:9.1f} us")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(report, file, indent=1)


if __name__ == "__main__":
    main()
