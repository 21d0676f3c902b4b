"""gpufleet rightsize on 1,000 GPUs measured over 7 days at 30 s (target: analysed in under 10 s).

Every query rightsize asks is aggregated over the window by Prometheus (quantile_over_time, max_over_time,
count_over_time, last_over_time, avg_over_time: gpufleet/fleet/usage.py), so what comes back is one sample per
series, not the 20,160 samples a series has in 7 days. The stand-in here is a local HTTP server that answers those
queries with what a Prometheus would answer for a synthetic fleet (125 nodes of 8 H100, each GPU in two 3g.40gb
halves, every half held by a pod, a third of the pods replaced during the week: about 2,670 series per metric); what is
timed is gpufleet's side: the HTTP round trips, the answers parsed and joined per series, the workloads judged, the
pool repacked and priced.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from benchmarks.common import REPO, Figure

NODES = 125
GPUS_PER_NODE = 8
WINDOW = "7d"
WINDOW_S = 7 * 86400
SCRAPE_S = 30
END = 1_796_040_000.0


def _suffix(rng: random.Random) -> str:
    """A pod name's random suffix, as Kubernetes makes them (5 of its 27 characters)."""
    return "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))


def _series() -> list[dict]:
    """(labels, p95, max, samples, capacity, activity) of every series of the synthetic fleet."""
    rng = random.Random(20261207)
    out = []
    apps = [("chat", 7_000), ("embed", 13_000), ("rerank", 31_000), ("summarize", 36_000)]
    for n in range(NODES):
        node = f"aks-infer1c2a-31415926-vmss{n:06x}"
        for gpu in range(GPUS_PER_NODE):
            for gi in (1, 2):
                app, memory = apps[rng.randrange(len(apps))]
                pods = [f"{app}-6b7c8d9f5-{_suffix(rng)}"]
                if rng.random() < 1 / 3:  # replaced during the week: the old pod's series ends early
                    pods.insert(0, f"{app}-6b7c8d9f5-{_suffix(rng)}")
                for k, pod in enumerate(pods):
                    labels = {
                        "gpu": str(gpu),
                        "UUID": f"GPU-{n:04d}{gpu}",
                        "modelName": "NVIDIA H100 80GB HBM3",
                        "Hostname": node,
                        "GPU_I_PROFILE": "3g.40gb",
                        "GPU_I_ID": str(gi),
                        "exported_namespace": "ml",
                        "exported_pod": pod,
                        "exported_container": "server",
                        "namespace": "gpu-operator",
                        "pod": f"nvidia-dcgm-exporter-{n:05d}",
                        "service": "nvidia-dcgm-exporter",
                        "node": node,
                        "pool": "infer",
                    }
                    peak = memory * rng.uniform(0.9, 1.05)
                    samples = WINDOW_S // SCRAPE_S // (2 if len(pods) > 1 else 1)
                    present = k == len(pods) - 1
                    out.append(
                        {
                            "labels": labels,
                            "p95": peak * 0.97,
                            "max": peak,
                            "samples": samples,
                            "activity": rng.uniform(0.05, 0.9),
                            "present": present,
                        }
                    )
    return out


def _answers() -> dict[str, bytes]:
    from gpufleet.fleet.usage import queries

    fleet = _series()
    asked = queries(WINDOW)

    def vector(rows: list[tuple[dict, float]]) -> bytes:
        result = [{"metric": labels, "value": [END, f"{value:.6g}"]} for labels, value in rows]
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()

    named = {"__name__": "DCGM_FI_DEV_FB_USED"}
    return {
        asked["now"]: vector([({**named, **s["labels"]}, s["max"]) for s in fleet if s["present"]]),
        asked["p95"]: vector([(s["labels"], s["p95"]) for s in fleet]),
        asked["max"]: vector([(s["labels"], s["max"]) for s in fleet]),
        asked["samples"]: vector([(s["labels"], s["samples"]) for s in fleet]),
        asked["capacity"]: vector([(s["labels"], 40_192) for s in fleet]),
        asked["activity"]: vector([(s["labels"], s["activity"]) for s in fleet]),
        asked["owners"]: vector([]),
        asked["ksm"]: vector([]),
        asked["pending"]: vector([]),
    }


def _server(answers: dict[str, bytes]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/api/v1/status/buildinfo":
                body = b'{"status":"success","data":{"version":"2.42.0 (stand-in)"}}'
            else:
                body = answers[urllib.parse.parse_qs(url.query)["query"][0]]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def run() -> list[Figure]:
    from gpufleet.azure.cost import stack_cost
    from gpufleet.catalog import load_catalog
    from gpufleet.fleet.prometheus import Prometheus
    from gpufleet.fleet.rightsize import propose
    from gpufleet.fleet.usage import measure
    from gpufleet.plan.build import plan_stack
    from gpufleet.spec.load import load_stack_text

    text = (REPO / "examples" / "rightsize" / "Pulumi.dev-eastus.yaml").read_text()
    text = text.replace("count: 4\n", f"count: {NODES}\n").replace("{min: 4, max: 8}", f"{{min: {NODES}, max: 200}}")
    loaded = load_stack_text(text, "bench-rightsize.yaml")
    assert loaded.stack is not None, loaded.diagnostics
    catalog = load_catalog()
    plan = plan_stack(loaded.stack, catalog)
    cost = stack_cost(loaded.stack, catalog)
    server = _server(_answers())
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        start = time.perf_counter()
        usage = measure(Prometheus(url, env={}), WINDOW, WINDOW_S, END)
        proposal = propose(loaded.stack, plan, catalog, cost, usage)
        seconds = time.perf_counter() - start
    finally:
        server.shutdown()
        server.server_close()
    (pool,) = proposal.pools
    print(
        f"   {NODES * GPUS_PER_NODE} GPUs, {len(usage.series)} series over {WINDOW}: "
        f"{len(proposal.workloads)} workloads, {pool.range_before.count} -> {pool.nodes_after} nodes, "
        f"{pool.gpus_freed} GPUs freed"
    )
    return [
        Figure("rightsize 1,000 GPUs x 7 d at 30 s (Prometheus-side aggregation): time", seconds, "s", 10.0),
        Figure("rightsize 1,000 GPUs x 7 d: series analysed", len(usage.series), ""),
    ]
