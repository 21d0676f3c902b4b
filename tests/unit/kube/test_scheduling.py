"""Scheduling checks: taints and tolerations, nodeSelector, required node affinity, as kube-scheduler decides."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.kube.scheduling import NodeShape, Placement, Taint, Toleration, untolerated, why_not

# The NVIDIA device-plugin DaemonSet's template.spec, as its helm chart renders it.
DEVICE_PLUGIN_SPEC = {
    "tolerations": [
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
        {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
    ],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In", "values": ["true"]}
                        ]
                    },
                    {
                        "matchExpressions": [
                            {
                                "key": "feature.node.kubernetes.io/cpu-model.vendor_id",
                                "operator": "In",
                                "values": ["NVIDIA"],
                            }
                        ]
                    },
                    {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]},
                ]
            }
        }
    },
}
AKS_T4_LABELS = {"kubernetes.azure.com/agentpool": "t4shared", "kubernetes.azure.com/accelerator": "nvidia"}
SKU_GPU = Taint("sku", "gpu", "NoSchedule")


def node(labels=None, taints=(), name="pool") -> NodeShape:
    return NodeShape(name=name, labels=labels or {}, taints=tuple(Taint.parse(t) for t in taints))


def affinity(*terms) -> Placement:
    return Placement(node_selector={}, required_terms=tuple(terms), tolerations=())


def expr(key, operator, *values) -> dict:
    return {"key": key, "operator": operator, "values": list(values)}


def tolerating(*tolerations: Toleration) -> Placement:
    return Placement(node_selector={}, required_terms=None, tolerations=tolerations)


# --- Taint ------------------------------------------------------------------------------------------------------


def test_parse_reads_key_value_and_effect():
    assert Taint.parse("sku=gpu:NoSchedule") == Taint("sku", "gpu", "NoSchedule")
    assert Taint.parse("nvidia.com/gpu:NoExecute") == Taint("nvidia.com/gpu", "", "NoExecute")
    assert Taint.parse("dedicated=:PreferNoSchedule") == Taint("dedicated", "", "PreferNoSchedule")


def test_str_writes_the_kubectl_form():
    assert str(Taint("sku", "gpu", "NoSchedule")) == "sku=gpu:NoSchedule"
    assert str(Taint("nvidia.com/gpu", effect="NoExecute")) == "nvidia.com/gpu:NoExecute"


def test_parse_rejects_unknown_effect():
    with pytest.raises(ValueError, match="unknown effect 'NoSchedul'"):
        Taint.parse("sku=gpu:NoSchedul")
    with pytest.raises(ValueError, match="unknown effect 'noschedule'"):  # effects are case-sensitive
        Taint.parse("sku=gpu:noschedule")


@pytest.mark.parametrize(
    "text", ["sku=gpu", "sku", "", ":NoSchedule", "=gpu:NoSchedule", "a=b=c:NoSchedule", "a:b:NoSchedule"]
)
def test_parse_rejects_malformed_text(text):
    with pytest.raises(ValueError, match="expected key=value:Effect or key:Effect"):
        Taint.parse(text)


def test_a_taint_cannot_be_built_with_an_unknown_effect_or_no_key():
    with pytest.raises(ValueError, match="unknown taint effect"):
        Taint("sku", "gpu", "Evict")
    with pytest.raises(ValueError, match="needs a key"):
        Taint("")


_CHARS = "abcz019.-_/AZ"
_KEY = st.text(alphabet=_CHARS, min_size=1, max_size=12)
_VALUE = st.text(alphabet=_CHARS, max_size=8)
_TAINTS = st.builds(
    Taint, key=_KEY, value=_VALUE, effect=st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"])
)


@settings(max_examples=50, deadline=None)
@given(_TAINTS)
def test_parse_reads_back_what_str_writes(taint):
    assert Taint.parse(str(taint)) == taint


# --- Toleration -------------------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(_TAINTS)
def test_an_equal_toleration_built_from_a_taint_tolerates_it(taint):
    assert Toleration(key=taint.key, operator="Equal", value=taint.value, effect=taint.effect).tolerates(taint)
    assert Toleration(key=taint.key, operator="Equal", value=taint.value).tolerates(taint)


@settings(max_examples=50, deadline=None)
@given(_TAINTS)
def test_exists_toleration_without_key_tolerates_every_taint(taint):
    assert Toleration(operator="Exists").tolerates(taint)


def test_exists_toleration_with_a_key_tolerates_that_key_whatever_the_value():
    tol = Toleration(key="sku", operator="Exists")
    assert tol.tolerates(Taint("sku", "gpu"))
    assert tol.tolerates(Taint("sku", "cpu", "NoExecute"))
    assert tol.tolerates(Taint("sku"))
    assert not tol.tolerates(Taint("nvidia.com/gpu"))


def test_equal_toleration_needs_key_and_value():
    tol = Toleration(key="sku", value="gpu")
    assert tol.tolerates(Taint("sku", "gpu"))
    assert not tol.tolerates(Taint("sku", "cpu"))
    assert not tol.tolerates(Taint("sku"))
    assert not tol.tolerates(Taint("other", "gpu"))


def test_toleration_effect_must_match_unless_empty():
    assert not Toleration(key="sku", value="gpu", effect="NoSchedule").tolerates(Taint("sku", "gpu", "NoExecute"))
    assert Toleration(key="sku", value="gpu").tolerates(Taint("sku", "gpu", "NoExecute"))
    assert not Toleration(operator="Exists", effect="NoExecute").tolerates(Taint("sku", "gpu", "NoSchedule"))


def test_unknown_or_miscased_operator_tolerates_nothing():
    assert not Toleration(key="sku", operator="exists").tolerates(Taint("sku", "gpu"))
    assert not Toleration(key="sku", operator="Equals", value="gpu").tolerates(Taint("sku", "gpu"))
    assert not Toleration(operator="Bogus").tolerates(Taint("sku", "gpu"))


def test_equal_toleration_without_key_tolerates_nothing():
    assert not Toleration(operator="Equal").tolerates(Taint("sku"))
    assert not Toleration(operator="Equal", value="gpu").tolerates(Taint("sku", "gpu"))


def test_from_dict_defaults_to_equal_and_ignores_toleration_seconds():
    assert Toleration.from_dict({"key": "sku", "value": "gpu", "tolerationSeconds": 300}) == Toleration(
        key="sku", operator="Equal", value="gpu"
    )
    assert Toleration.from_dict({"operator": "Exists"}) == Toleration(operator="Exists")
    assert Toleration.from_dict({"key": "a", "operator": None, "value": None, "effect": None}) == Toleration(key="a")


def test_from_dict_rejects_a_non_string_value():
    with pytest.raises(ValueError, match="toleration value must be a string, got bool True"):
        Toleration.from_dict({"key": "sku", "value": True})


# --- taints on a node -------------------------------------------------------------------------------------------


def test_prefer_no_schedule_never_blocks():
    shape = node(taints=["spot=true:PreferNoSchedule"])
    assert untolerated(tolerating(), shape) == []
    assert why_not(tolerating(), shape) == []


def test_no_schedule_and_no_execute_taints_block_in_node_order():
    shape = node(taints=["sku=gpu:NoSchedule", "soft:PreferNoSchedule", "drain:NoExecute"])
    assert untolerated(tolerating(), shape) == [SKU_GPU, Taint("drain", effect="NoExecute")]
    assert why_not(tolerating(), shape) == [
        "taint sku=gpu:NoSchedule not tolerated",
        "taint drain:NoExecute not tolerated",
    ]


def test_one_matching_toleration_is_enough_per_taint():
    shape = node(taints=["sku=gpu:NoSchedule", "drain:NoExecute"])
    placement = tolerating(Toleration(key="nope", operator="Exists"), Toleration(key="sku", value="gpu"))
    assert untolerated(placement, shape) == [Taint("drain", effect="NoExecute")]


# --- nodeSelector -----------------------------------------------------------------------------------------------


def test_node_selector_needs_every_key_with_exactly_that_value():
    placement = Placement(
        node_selector={"nvidia.com/gpu.present": "true", "kubernetes.io/os": "linux"},
        required_terms=None,
        tolerations=(),
    )
    assert why_not(placement, node({"nvidia.com/gpu.present": "true", "kubernetes.io/os": "linux", "x": "y"})) == []
    assert why_not(placement, node({"nvidia.com/gpu.present": "false"})) == [
        "nodeSelector nvidia.com/gpu.present=true: node has nvidia.com/gpu.present=false",
        "nodeSelector kubernetes.io/os=linux: node has no such label",
    ]


# --- required node affinity -------------------------------------------------------------------------------------


def test_terms_are_ored_expressions_are_anded():
    placement = affinity(
        {"matchExpressions": [expr("a", "In", "1"), expr("b", "In", "1")]},
        {"matchExpressions": [expr("c", "Exists")]},
    )
    assert why_not(placement, node({"a": "1", "b": "1"})) == []
    assert why_not(placement, node({"c": "anything"})) == []
    assert why_not(placement, node({"a": "1"})) == [
        "required node affinity: no term matches (a In [1] and b In [1]; c Exists)"
    ]


def test_in_matches_any_listed_value():
    placement = affinity({"matchExpressions": [expr("gpu", "In", "a100", "h100")]})
    assert why_not(placement, node({"gpu": "h100"})) == []
    assert why_not(placement, node({"gpu": "t4"})) != []
    assert why_not(placement, node({})) != []


def test_notin_matches_a_missing_label():
    placement = affinity({"matchExpressions": [expr("gpu", "NotIn", "t4")]})
    assert why_not(placement, node({})) == []
    assert why_not(placement, node({"gpu": "a100"})) == []
    assert why_not(placement, node({"gpu": "t4"})) == ["required node affinity: no term matches (gpu NotIn [t4])"]


def test_exists_and_does_not_exist_look_only_at_the_key():
    assert why_not(affinity({"matchExpressions": [expr("gpu", "Exists")]}), node({"gpu": ""})) == []
    assert why_not(affinity({"matchExpressions": [expr("gpu", "DoesNotExist")]}), node({})) == []
    assert why_not(affinity({"matchExpressions": [expr("gpu", "DoesNotExist")]}), node({"gpu": "x"})) == [
        "required node affinity: no term matches (gpu DoesNotExist)"
    ]


def test_gt_and_lt_compare_integers():
    assert why_not(affinity({"matchExpressions": [expr("gpus", "Gt", "4")]}), node({"gpus": "8"})) == []
    assert why_not(affinity({"matchExpressions": [expr("gpus", "Gt", "8")]}), node({"gpus": "8"})) != []
    assert (
        why_not(affinity({"matchExpressions": [expr("gpus", "Lt", "10")]}), node({"gpus": "9"})) == []
    )  # not "10" < "9"
    assert why_not(affinity({"matchExpressions": [expr("gpus", "Lt", "-1")]}), node({"gpus": "-2"})) == []
    assert why_not(affinity({"matchExpressions": [expr("gpus", "Gt", "0")]}), node({})) != []


@pytest.mark.parametrize("label", ["eight", "8.0", " 8", "8_0", "", "99999999999999999999"])
def test_gt_with_non_integer_label_does_not_match(label):
    assert why_not(affinity({"matchExpressions": [expr("gpus", "Gt", "1")]}), node({"gpus": label})) == [
        "required node affinity: no term matches (gpus Gt [1])"
    ]


def test_gt_with_a_non_integer_or_several_values_matches_nothing():
    assert why_not(affinity({"matchExpressions": [expr("gpus", "Gt", "x")]}), node({"gpus": "8"})) == [
        "required node affinity: no term matches (gpus Gt [x] (invalid: Gt needs an integer value))"
    ]
    assert why_not(affinity({"matchExpressions": [expr("gpus", "Lt", "9", "10")]}), node({"gpus": "8"})) != []


def test_requirements_kubernetes_would_refuse_match_nothing():
    assert why_not(affinity({"matchExpressions": [expr("gpu", "NotIn")]}), node({})) == [
        "required node affinity: no term matches (gpu NotIn [] (invalid: NotIn needs values))"
    ]
    assert why_not(affinity({"matchExpressions": [expr("gpu", "Exists", "x")]}), node({"gpu": "x"})) != []
    assert why_not(affinity({"matchExpressions": [expr("gpu", "in", "x")]}), node({"gpu": "x"})) == [
        "required node affinity: no term matches (gpu in [x] (invalid: unknown operator 'in'))"
    ]


def test_empty_term_matches_nothing():
    assert why_not(affinity({}), node({"a": "b"})) == ["required node affinity: no term matches (empty term)"]
    assert why_not(affinity({"matchExpressions": [], "matchFields": None}), node()) != []
    # an empty term next to a satisfiable one does not spoil it
    assert why_not(affinity({}, {"matchExpressions": [expr("a", "Exists")]}), node({"a": "b"})) == []


def test_empty_list_of_terms_matches_nothing():
    assert why_not(affinity(), node({"a": "b"})) == ["required node affinity: no nodeSelectorTerms, so no node matches"]


def test_no_required_affinity_matches_every_node():
    assert why_not(Placement(node_selector={}, required_terms=None, tolerations=()), node()) == []


def test_match_fields_compare_metadata_name_with_the_node_name():
    placement = affinity({"matchFields": [expr("metadata.name", "In", "gpu-a")]})
    assert why_not(placement, node(name="gpu-a")) == []
    assert why_not(placement, node(name="gpu-b")) == [
        "required node affinity: no term matches (metadata.name In [gpu-a])"
    ]
    assert why_not(affinity({"matchFields": [expr("metadata.name", "NotIn", "gpu-a")]}), node(name="gpu-b")) == []


def test_match_fields_and_expressions_in_one_term_are_anded():
    placement = affinity({"matchExpressions": [expr("a", "Exists")], "matchFields": [expr("metadata.name", "In", "n")]})
    assert why_not(placement, node({"a": "1"}, name="n")) == []
    assert why_not(placement, node({"a": "1"}, name="m")) != []
    assert why_not(placement, node({}, name="n")) != []


def test_match_fields_other_than_metadata_name_in_or_notin_match_nothing():
    assert why_not(affinity({"matchFields": [expr("spec.unschedulable", "NotIn", "true")]}), node()) != []
    assert why_not(affinity({"matchFields": [expr("metadata.name", "Exists")]}), node(name="n")) != []
    assert why_not(affinity({"matchFields": [expr("metadata.name", "In", "n", "m")]}), node(name="n")) != []


# --- reading a pod spec -----------------------------------------------------------------------------------------


def test_from_pod_spec_tolerates_missing_and_null_fields():
    empty = Placement(node_selector={}, required_terms=None, tolerations=())
    assert Placement.from_pod_spec({}) == empty
    assert Placement.from_pod_spec(None) == empty
    assert (
        Placement.from_pod_spec({"nodeSelector": None, "tolerations": None, "affinity": {"nodeAffinity": None}})
        == empty
    )
    no_required = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": None}}}
    assert Placement.from_pod_spec(no_required) == empty


def test_from_pod_spec_reads_a_required_affinity_without_terms_as_matching_nothing():
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}}
    placement = Placement.from_pod_spec(spec)
    assert placement.required_terms == ()
    assert why_not(placement, node({"a": "b"})) != []


def test_from_pod_spec_reads_a_null_term_as_the_empty_term():
    spec = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [None]}}}
    }
    assert Placement.from_pod_spec(spec).required_terms == ({},)


def test_from_pod_spec_ignores_preferred_affinity_and_pod_affinity():
    spec = {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [expr("a", "In", "b")]}}
                ]
            },
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "x"}]},
        },
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
    }
    assert why_not(Placement.from_pod_spec(spec), node()) == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"nodeSelector": {"nvidia.com/gpu.present": True}}, "quote it in YAML"),
        ({"tolerations": {"key": "sku"}}, "tolerations must be a list"),
        ({"tolerations": ["sku"]}, "a toleration must be a mapping"),
        ({"affinity": []}, "affinity must be a mapping"),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [expr("a", "In", True)]}]
                        }
                    }
                }
            },
            r"nodeSelectorTerms\[0\]\.matchExpressions\[0\]\.values: True is a bool",
        ),
    ],
)
def test_from_pod_spec_rejects_malformed_fields(spec, message):
    with pytest.raises(ValueError, match=message):
        Placement.from_pod_spec(spec)


# --- the NVIDIA device plugin on an AKS GPU pool ----------------------------------------------------------------


def test_device_plugin_stays_off_an_aks_gpu_pool_it_does_not_tolerate_and_that_lacks_the_labels():
    placement = Placement.from_pod_spec(DEVICE_PLUGIN_SPEC)
    pool = NodeShape(name="t4shared", labels=AKS_T4_LABELS, taints=(SKU_GPU,))
    assert untolerated(placement, pool) == [SKU_GPU]
    assert why_not(placement, pool) == [
        "taint sku=gpu:NoSchedule not tolerated",
        "required node affinity: no term matches (feature.node.kubernetes.io/pci-10de.present In [true]; "
        "feature.node.kubernetes.io/cpu-model.vendor_id In [NVIDIA]; nvidia.com/gpu.present In [true])",
    ]


def test_device_plugin_schedules_once_the_node_is_labelled_and_the_pod_tolerates_sku_gpu():
    spec = {
        **DEVICE_PLUGIN_SPEC,
        "tolerations": [
            *DEVICE_PLUGIN_SPEC["tolerations"],
            {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        ],
    }
    pool = NodeShape(name="t4shared", labels={**AKS_T4_LABELS, "nvidia.com/gpu.present": "true"}, taints=(SKU_GPU,))
    assert why_not(Placement.from_pod_spec(spec), pool) == []
    # each fix alone is not enough
    assert why_not(Placement.from_pod_spec(DEVICE_PLUGIN_SPEC), pool) == ["taint sku=gpu:NoSchedule not tolerated"]
    unlabelled = NodeShape(name="t4shared", labels=AKS_T4_LABELS, taints=(SKU_GPU,))
    assert len(why_not(Placement.from_pod_spec(spec), unlabelled)) == 1
