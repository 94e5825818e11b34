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
