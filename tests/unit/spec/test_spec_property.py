"""Property-based: generated stack documents are accepted and round-trip; mutated ones fail cleanly.

`valid_stacks` builds documents that follow every rule (sizes, MIG layouts and limits drawn from the catalog),
so any diagnostic on them is a false positive. `mutate` then breaks them at random places (delete, rename,
retype, add keys); whatever comes out, the loader must answer with a result, never an exception: either
diagnostics that each carry a file, a line inside the file, a key path and a message, or a valid stack that
round-trips. 2,000+ mutated documents run per test session.
"""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from gpufleet.catalog import load_catalog
from gpufleet.spec.load import LoadedStack, dump_stack, load_stack_text
from tests.conftest import TODAY
from tests.stacks import release_pins

CATALOG = load_catalog()
SIZES = [
    s for s in CATALOG.vm_sizes if s.aks_supported and not s.retired(TODAY) and CATALOG.gpu(s.gpu).vendor == "nvidia"
]
REGIONS = sorted(CATALOG.region_names)
# the AMD pins too: a drawn stack may have AMD pools or host groups, which need them (gpufleet.spec.rules)
RELEASE = release_pins(amd_gpu_operator="v1.5.1", amdgpu="30.10.1", rocm="7.0.1")
FILE = "stack.yaml"  # not Pulumi.<stage>-<region>.yaml: the file-name rule would reject every document
SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


@st.composite
def pool_docs(draw: st.DrawFn, name: str) -> dict[str, Any]:
    size = draw(st.sampled_from(SIZES))
    gpu = CATALOG.gpu(size.gpu)
    pool: dict[str, Any] = {"name": name, "vm_size": size.name}
    if draw(st.booleans()):
        lo = draw(st.integers(0, 4))
        hi = draw(st.integers(max(lo, 1), 12))
        pool |= {"count": draw(st.integers(lo, hi)), "autoscaling": {"min": lo, "max": hi}}
        if lo == 0:
            pool["scale_to_zero"] = True
    else:
        pool["count"] = draw(st.integers(0, 20))
    if draw(st.booleans()):
        pool["spot"] = {"max_price": draw(st.sampled_from([-1, 0.5, 2.12345]))}
        if draw(st.booleans()):
            pool["upgrade"] = {"max_unavailable": draw(st.sampled_from([1, "10%", "100%"]))}
    elif draw(st.booleans()):
        pool["upgrade"] = draw(st.sampled_from([{"max_surge": "33%"}, {"max_surge": 2}, {"max_unavailable": 1}]))
    pool["zones"] = draw(st.lists(st.sampled_from(["1", "2", "3"]), unique=True, max_size=3))
    # a size AKS documents only with its driver install skipped (confidential GPUs) takes the GPU Operator's driver
    pool["driver"] = "operator" if size.aks_skip_gpu_driver else draw(st.sampled_from(["aks", "operator"]))
    skus = ["Ubuntu", "Ubuntu2204"] + (["AzureLinux", "AzureLinux3"] if size.azure_linux else [])
    pool["os_sku"] = draw(st.sampled_from(skus))
    if size.aks_mig and gpu.mig and draw(st.booleans()):
        if draw(st.booleans()):
            pool["mig"] = {"managed_by": "aks", "profile": draw(st.sampled_from(["MIG1g", "MIG2g", "MIG3g", "MIG7g"]))}
        else:
            profile = draw(st.sampled_from(gpu.mig.profiles))
            pool["mig"] = {
                "managed_by": "operator",
                "config_name": f"{name}-{profile.compute_slices}g",
                "devices": [{"gpus": "all", "profiles": {profile.name: draw(st.integers(1, profile.max_count))}}],
            }
    modes = ["none", "time-slicing"] + ([] if "mig" in pool else ["mps"])
    mode = draw(st.sampled_from(modes))
    pool["sharing"] = {"mode": mode} | ({"replicas": draw(st.integers(2, 64))} if mode != "none" else {})
    cpu = draw(st.sampled_from(["none", "static"]))
    topo = draw(
        st.sampled_from(["none", "best-effort"] + (["restricted", "single-numa-node"] if cpu == "static" else []))
    )
    pool["tuning"] = {"cpu_manager_policy": cpu, "topology_manager_policy": topo}
    if draw(st.booleans()):
        pool["labels"] = {"team": draw(st.sampled_from(["ml", "infra", "research"]))}
    return pool


@st.composite
def valid_stacks(draw: st.DrawFn) -> dict[str, Any]:
    stage = draw(st.sampled_from(["dev", "staging", "prod"]))
    config: dict[str, Any] = {"gpufleet:stage": stage, "gpufleet:release": dict(RELEASE)}
    kind = draw(st.sampled_from(["aks", "baremetal", "both"]))
    if kind == "baremetal":
        config["gpufleet:region"] = draw(st.sampled_from(["local", "fra1", "dc2"]))
    else:
        config["gpufleet:region"] = draw(st.sampled_from(REGIONS))
    if kind in ("aks", "both"):
        names = draw(
            st.lists(st.from_regex(r"[a-r][a-z0-9]{0,11}", fullmatch=True), min_size=1, max_size=4, unique=True)
        )
        config["gpufleet:aks"] = {
            "cluster": {"network": {"vnet_cidr": "10.0.0.0/16", "subnet_cidr": "10.0.0.0/20"}},
            "gpu_pools": [draw(pool_docs(n)) for n in names],
        }
    if kind in ("baremetal", "both"):
        mig_gpus = [g for g in CATALOG.gpus if g.mig]
        gpu = draw(st.sampled_from(CATALOG.gpus))
        group: dict[str, Any] = {"name": "gpu_hosts", "gpu_model": draw(st.sampled_from([gpu.name, *gpu.aliases]))}
        group["gpus_per_host"] = draw(st.integers(1, 8))
        if gpu in mig_gpus and draw(st.booleans()):
            profile = draw(st.sampled_from(gpu.mig.profiles))
            group["mig"] = {"config_name": "fleet", "devices": [{"profiles": {profile.name: profile.max_count}}]}
        group["tuning_profile"] = draw(st.sampled_from(["default", "tuned"]))
        config["gpufleet:baremetal"] = {"inventory": f"inventories/{stage}-x", "host_groups": [group]}
        config["gpufleet:tuning_profiles"] = {
            "tuned": {
                "cores_per_gpu": draw(st.integers(4, 8)),
                "hugepages_1g_per_gpu": draw(st.integers(0, 8)),
                "isolation": draw(st.booleans()),
            }
        }
    return {"config": config}


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["all", "MIG9g", "1g.10gb", "Standard_NC6s_v3", "1.30", "v1", "sku=gpu:Nope", "-1", "0%"]),
    st.lists(st.integers(-3, 9), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=2),
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _get(node: Any, path: tuple) -> Any:
    for part in path:
        node = node[part]
    return node


@st.composite
def mutated_stacks(draw: st.DrawFn) -> dict[str, Any]:
    doc = draw(valid_stacks())
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:  # the whole config was deleted: nothing left to break
            break
        path = draw(st.sampled_from(paths))
        parent, key = _get(doc, path[:-1]), path[-1]
        action = draw(st.sampled_from(["delete", "retype", "rename", "add", "empty"]))
        if action == "delete" or (action == "rename" and isinstance(parent, list)):
            del parent[key]
        elif action == "retype":
            parent[key] = draw(JUNK)
        elif action == "rename":
            parent[f"{key}x" if draw(st.booleans()) else str(key)[:-1] or "k"] = parent.pop(key)
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "vm_sise", "gpufleet:relase", "mig", "replicas"]))] = draw(JUNK)
        elif action == "empty":
            parent[key] = draw(st.sampled_from([{}, [], ""]))
    return doc


def render(doc: dict[str, Any], as_yaml: bool) -> str:
    if not as_yaml:
        return json.dumps(doc, indent=2)  # JSON is YAML too, and keeps one key per line
    out = StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.dump(doc, out)
    return out.getvalue()


def assert_clean(result: LoadedStack, text: str) -> None:
    lines = text.count("\n") + 1
    if result.ok:
        again = load_stack_text(dump_stack(result.stack), "again.yaml", today=TODAY)
        assert again.ok, again.diagnostics
        assert again.stack == result.stack
        return
    assert result.stack is None and result.diagnostics
    for d in result.diagnostics:
        assert d.file == FILE
        assert isinstance(d.line, int) and 1 <= d.line <= lines, d
        assert isinstance(d.path, str)
        assert isinstance(d.message, str) and d.message.strip(), d


@settings(max_examples=250, **SETTINGS)
@given(doc=valid_stacks(), as_yaml=st.booleans())
def test_generated_valid_stacks_are_accepted_and_round_trip(doc, as_yaml):
    text = render(doc, as_yaml)
    result = load_stack_text(text, FILE, today=TODAY)
    assert result.ok, "\n".join(map(str, result.diagnostics)) + "\n" + text
    assert_clean(result, text)


# 500 shrinking examples here; tests/unit/test_fuzz.py runs mutated stacks at volume (with the same round trip).
@settings(max_examples=500, **SETTINGS)
@given(doc=mutated_stacks(), as_yaml=st.booleans())
def test_mutated_stacks_fail_cleanly_or_round_trip(doc, as_yaml):
    text = render(doc, as_yaml)
    result = load_stack_text(text, FILE, today=TODAY)
    event("still valid" if result.ok else f"{min(len(result.diagnostics), 5)}+ diagnostics")
    assert_clean(result, text)


@settings(max_examples=300, **SETTINGS)
@given(
    value=st.recursive(
        JUNK,
        lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    ),
    section=st.sampled_from(["release", "aks", "baremetal", "tuning_profiles", "stage", "region"]),
)
def test_arbitrary_values_in_any_section_never_raise(value, section):
    text = json.dumps({"config": {"gpufleet:stage": "dev", "gpufleet:region": "eastus", f"gpufleet:{section}": value}})
    result = load_stack_text(text, FILE, today=TODAY)
    assert not result.ok
    assert_clean(result, text)
