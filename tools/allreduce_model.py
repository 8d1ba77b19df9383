#!/usr/bin/env python3
"""The alpha-beta cost model of dptrain's all-reduce algorithms (docs/collectives.md, "Cost
model"): predictions for a stated network, and a check against `dptrain bench allreduce --json`.

  allreduce_model.py predict [--alpha-us 5] [--gbps 100] [--local-alpha-us 1] [--local-gbs 20]
                             [--per-node 8] [--ranks 8,64,512,4096] [--sizes 1K,1M,64M,256M]
      the predicted time of each algorithm at each rank count and size

  allreduce_model.py check [--local LOCAL.json --per-node L] FIT.json OTHER.json ...
      fits the ring's alpha (sizes <= 16 KiB) and beta (sizes >= 4 MiB, out of cache) to
      FIT.json (one `bench allreduce --algo ring --json` run; LOCAL.json: one inside a node, for
      hier's alpha_l and beta_l), then prints every run's measured time next to the
      prediction at its rank count (hier rows by the hier formula, L ranks per node)

Model, n bytes per rank, N ranks (L per node on M nodes for the hierarchical algorithm), alpha
seconds per message step, beta seconds per byte (the reduction's memory traffic folded in):
  ring    2(N-1) alpha + 2(N-1)/N n beta
  rd      ceil(log2 N) (alpha + n beta), + 2 (alpha + n beta) when N is not a power of two
  direct  (N-1) alpha + (N-1) n beta up to 4 ranks (all-to-all hello round), above that
          2 ceil(log2 N) alpha + (N-1) n beta (dissemination: headers, then payloads)
  hier    2(L-1) (alpha_l + n/L beta_l) + 2(M-1) (alpha + n/M beta)
          (in the cross-node phase the node's L rings share its link: n/M bytes per step)
Only the Python standard library is used.
"""
import json
import math
import sys

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(s):
    s = s.strip()
    if s and s[-1].upper() in UNITS:
        return int(float(s[:-1]) * UNITS[s[-1].upper()])
    return int(s)


def show_size(n):
    for u, v in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= v and n % v == 0:
            return "%d %siB" % (n // v, u)
    return "%d B" % n


def show_time(t):
    if t < 1e-3:
        return "%.1f us" % (t * 1e6)
    if t < 1:
        return "%.2f ms" % (t * 1e3)
    return "%.2f s" % t


def ring(n, N, a, b):
    return 2 * (N - 1) * a + 2 * (N - 1) / N * n * b


def rd(n, N, a, b):
    steps = math.ceil(math.log2(N)) + (0 if N & (N - 1) == 0 else 2)
    return steps * (a + n * b)


def direct(n, N, a, b):
    if N <= 4:
        return (N - 1) * a + (N - 1) * n * b
    return 2 * math.ceil(math.log2(N)) * a + (N - 1) * n * b


def hier(n, N, L, a, b, al, bl):
    M = N // L
    return 2 * (L - 1) * (al + n / L * bl) + 2 * (M - 1) * (a + n / M * b)


def predict(args):
    opt = {"--alpha-us": "5", "--gbps": "100", "--local-alpha-us": "1", "--local-gbs": "20",
           "--per-node": "8", "--ranks": "8,64,512,4096", "--sizes": "1K,1M,64M,256M"}
    for k, v in zip(args[::2], args[1::2]):
        if k not in opt:
            sys.exit("allreduce_model.py: unknown option %s" % k)
        opt[k] = v
    a = float(opt["--alpha-us"]) * 1e-6
    b = 8 / (float(opt["--gbps"]) * 1e9)
    al = float(opt["--local-alpha-us"]) * 1e-6
    bl = 1 / (float(opt["--local-gbs"]) * 1e9)
    L = int(opt["--per-node"])
    print("network: alpha %s us, %s Gb/s; inside a node: alpha %s us, %s GB/s, %d ranks per node"
          % (opt["--alpha-us"], opt["--gbps"], opt["--local-alpha-us"], opt["--local-gbs"], L))
    print("| ranks | size | ring | rd | direct | hier | best |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for N in (int(x) for x in opt["--ranks"].split(",")):
        for n in (parse_size(x) for x in opt["--sizes"].split(",")):
            t = {"ring": ring(n, N, a, b), "rd": rd(n, N, a, b), "direct": direct(n, N, a, b)}
            if N % L == 0 and N > L:
                t["hier"] = hier(n, N, L, a, b, al, bl)
            best = min(t, key=t.get)
            print("| %d | %s | %s | %s | %s | %s | %s |"
                  % (N, show_size(n), show_time(t["ring"]), show_time(t["rd"]),
                     show_time(t["direct"]), show_time(t["hier"]) if "hier" in t else "-", best))


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                row = json.loads(line)
                if "bytes" in row:  # not the header line
                    rows.append(row)
    if not rows:
        sys.exit("allreduce_model.py: %s has no JSON row (bench allreduce --json)" % path)
    return rows


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def fit_ring(path):
    """alpha from the sizes <= 16 KiB, beta from those >= 4 MiB (out of cache) of a ring run."""
    rows = load(path)
    N = rows[0]["ranks"]
    big = [r["dpt_us"] * 1e-6 / (2 * (N - 1) / N * r["bytes"]) for r in rows
           if r["bytes"] >= 4 << 20]
    if not big:
        sys.exit("allreduce_model.py: %s has no size >= 4 MiB to fit beta on" % path)
    b = median(big)
    small = [(r["dpt_us"] * 1e-6 - 2 * (N - 1) / N * r["bytes"] * b) / (2 * (N - 1))
             for r in rows if r["bytes"] <= 16 << 10]
    a = max(median(small), 0) if small else 0
    print("fit on %d ranks (%s): alpha %.2f us (sizes <= 16 KiB), beta %.3f ns/B (%.2f GB/s, "
          "sizes >= 4 MiB)" % (N, path, a * 1e6, b * 1e9, 1 / b / 1e9))
    return a, b


def check(args):
    local = None
    per_node = 0
    if args[:1] == ["--local"]:
        local, args = args[1], args[2:]
    if args[:1] == ["--per-node"]:
        per_node, args = int(args[1]), args[2:]
    a, b = fit_ring(args[0])
    al, bl = fit_ring(local) if local else (a, b)
    print("| ranks | algo | size | measured | model | model / measured |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for p in args:
        for r in load(p):
            t = r["dpt_us"] * 1e-6
            N = r["ranks"]
            if r.get("algo") == "hier" and per_node > 1 and N % per_node == 0:
                m = hier(r["bytes"], N, per_node, a, b, al, bl)
            else:
                m = ring(r["bytes"], N, a, b)
            print("| %d | %s | %s | %s | %s | %.2f |" % (N, r.get("algo", "?"),
                                                          show_size(r["bytes"]), show_time(t),
                                                          show_time(m), m / t))


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("predict", "check"):
        sys.exit(__doc__)
    if sys.argv[1] == "predict":
        predict(sys.argv[2:])
    elif len(sys.argv) < 3:
        sys.exit(__doc__)
    else:
        check(sys.argv[2:])


if __name__ == "__main__":
    main()
