import pytest

from graph.context import STAGE_NAMES, Context


def test_precedence_explicit_over_env_over_default():
    env = {"EGG_SEEDS": "7", "EGG_DEVICE": "cuda", "EGG_STAGES": "algorithm,tiling"}
    ctx = Context.resolve(env=env, seeds=3)
    assert ctx.seeds == 3  # explicit wins
    assert ctx.device == "cuda"  # from the environment
    assert ctx.stages == ("algorithm", "tiling")
    assert ctx.policy == "mixed"  # default
    assert Context.resolve(env={}).stages == STAGE_NAMES


def test_none_explicit_means_not_given():
    assert Context.resolve(env={"EGG_SEEDS": "5"}, seeds=None).seeds == 5


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"stages": "algorithm,tilling"}, "unknown stage"),
        ({"stages": "mapping"}, "cannot be skipped"),
        ({"device": "tpu"}, "device"),
        ({"policy": "lax"}, "policy"),
        ({"code_model": "gpt-4"}, "unknown model"),
        ({"seeds": 0}, "seeds"),
    ],
)
def test_invalid_settings_are_rejected(kw, msg):
    with pytest.raises(ValueError, match=msg):
        Context.resolve(env={}, **kw)


def test_round_trip_through_state():
    ctx = Context.resolve(env={}, device="cuda", seeds=2, tolerance=1e-3, stages="algorithm,memory")
    assert Context.from_dict(ctx.to_dict()) == ctx


def test_cpu_tuning_budget_is_small_and_gpu_budget_full():
    assert Context(device="cpu").budget_for("tiling") == Context().cpu_tune_budget
    assert Context(device="cuda").budget_for("tiling") == Context().tune_budget
    assert Context(device="cuda").budget_for("algorithm") == Context().refine_budget
    # on CPU a refinement can be verified but never adopted for speed: one shows the step works
    assert Context(device="cpu").budget_for("algorithm") == Context().cpu_refine_budget == 1
    assert Context(device="cpu", refine_budget=0).budget_for("algorithm") == 0


def test_context_from_json_values_is_coerced_and_validated():
    # what a server's context form or a checkpoint hands over: JSON types, lists for tuples
    ctx = Context(**{"device": "cuda", "seeds": "2", "stages": ["algorithm", "tiling"], "tolerance": "1e-3"})
    assert ctx.seeds == 2 and ctx.stages == ("algorithm", "tiling") and ctx.tolerance == 1e-3
    with pytest.raises(ValueError, match="device"):
        Context(device="tpu")  # type: ignore[arg-type]


def test_studio_schemas_build_on_every_python():
    """pydantic (and so the Studio form) must be able to read the input/output/state schemas; with
    `typing.TypedDict` this raises on Python < 3.12."""
    from pydantic import TypeAdapter

    from graph.state import EggInput, EggOutput, EggState, SeedInput, StageInput

    schema = TypeAdapter(EggInput).json_schema()
    assert {"task", "task_path", "out_dir"} <= set(schema["properties"])
    assert "settings" not in schema["properties"]  # settings are the run's context, not input
    out = TypeAdapter(EggOutput).json_schema()
    assert {"status", "decisions", "best"} <= set(out["properties"])
    status = out["properties"]["status"]
    assert set(status["enum"]) == {"running", "verified", "no_kernel", "bad_input"}
    for t in (EggState, StageInput, SeedInput):
        TypeAdapter(t).json_schema()
