"""@triton.autotune configs read from source and pinned (tools/autotune.py), and what the checker
says about them on CPU."""

from __future__ import annotations

import ast
from pathlib import Path

from tools import autotune

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
SRC = (CORPUS / "good" / "relu_autotune.py").read_text()


def test_literal_configs_are_read_in_source_order():
    (site,) = autotune.sites(SRC)
    assert site.kernel == "relu_kernel"
    assert site.configs == (
        'triton.Config({"BLOCK": 256}, num_warps=2)',
        'triton.Config({"BLOCK": 1024}, num_warps=4)',
        'triton.Config({"BLOCK": 4096}, num_warps=8)',
    )
    assert [(k, i) for k, i, _ in autotune.sweep(SRC)] == [
        ("relu_kernel", 0),
        ("relu_kernel", 1),
        ("relu_kernel", 2),
    ]


def test_pin_keeps_one_config_and_the_rest_of_the_file():
    pinned = autotune.pin(SRC, "relu_kernel", 'triton.Config({"BLOCK": 1024}, num_warps=4)')
    ast.parse(pinned)
    (site,) = autotune.sites(pinned)
    assert site.configs == ('triton.Config({"BLOCK": 1024}, num_warps=4)',)
    assert pinned.replace(" ", "").count("BLOCK") == SRC.replace(" ", "").count("BLOCK") - 2
    assert pinned.split("@triton.jit", 1)[1] == SRC.split("@triton.jit", 1)[1]
    # one config: nothing left to sweep, nothing for the interpreter to pin
    assert autotune.sweep(pinned) == [] and autotune.pin_first(pinned) == (pinned, [])


def test_offsets_survive_non_ascii_text_before_the_decorator():
    src = '# Größe: Kachel\n"""naïve"""\n' + SRC
    first, notes = autotune.pin_first(src)
    assert first.startswith('# Größe: Kachel\n"""naïve"""\n')
    assert autotune.sites(first)[0].configs == ('triton.Config({"BLOCK": 256}, num_warps=2)',)
    assert notes == [
        "interpreter: @triton.autotune kernel `relu_kernel` ran its first of 3 configs "
        "(the interpreter cannot time configs; a GPU run picks among them)"
    ]


def test_configs_built_by_code_or_broken_sources_are_left_alone():
    built = SRC.replace("configs=[", "configs=[c for c in [").replace("    ],\n    key", "    ]],\n    key")
    ast.parse(built)
    assert autotune.sites(built) == [] and autotune.sweep(built) == []
    assert autotune.sites("def (") == []
    try:
        autotune.pin(built, "relu_kernel", "x")
    except KeyError as e:
        assert "relu_kernel" in str(e)
    else:
        raise AssertionError("pin of a non-literal configs list must fail")


def test_several_autotuned_kernels_are_each_swept():
    two = (
        SRC
        + "\n\n"
        + SRC.split("class ModelNew")[0]
        .replace("relu_kernel", "other_kernel")
        .split("import triton.language as tl\n", 1)[1]
    )
    assert [s.kernel for s in autotune.sites(two)] == ["relu_kernel", "other_kernel"]
    assert len(autotune.sweep(two)) == 6
    first, notes = autotune.pin_first(two)
    assert [len(s.configs) for s in autotune.sites(first)] == [1, 1] and len(notes) == 2


def test_sources_too_deep_to_parse_are_read_as_having_nothing_to_sweep():
    # A generated expression of 200k terms overflows the AST builder (RecursionError); the agent
    # reads such a candidate as declaring nothing instead of failing its run.
    from nodes.llm_replies import read_tunables, tunable_variants

    deep = SRC + "\nX = " + "+".join(["1"] * 200_000) + "\n"
    assert (
        autotune.sites(deep) == [] and autotune.sweep(deep) == [] and autotune.pin_first(deep) == (deep, [])
    )
    assert read_tunables(deep) == ({}, {}) and tunable_variants(deep, {}) == []
