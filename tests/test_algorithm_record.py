"""Every algorithm is a record (:class:`evorl.rl.algorithm.Algorithm`) declared once in its
file; its workflow class names it, reads its fields from it and derives its ``agent:``
config section from the record's factory."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from evorl.algorithms.td3 import DDPG, TD3
from evorl.config import dataclass_from_signature
from evorl.engine.rl_base import ALGORITHM_FIELDS
from evorl.rl.algorithm import Algorithm, Family
from evorl.workflows import WORKFLOWS, PPOWorkflow, resolve_workflow_cls

NAMES = sorted(WORKFLOWS)


def fields_of(section: type) -> dict:
    return {f.name: (f.type, f.default) for f in dataclasses.fields(section)}


@pytest.mark.parametrize("name", NAMES)
def test_every_workflow_names_a_record_declared_beside_it_and_reads_its_fields_from_it(name):
    cls = resolve_workflow_cls(f"evorl.workflows.{name}")
    algorithm = cls.algorithm
    assert isinstance(algorithm, Algorithm) and isinstance(algorithm.family, Family)
    assert any(value is algorithm for value in vars(inspect.getmodule(cls)).values())
    for field in ALGORITHM_FIELDS:
        assert getattr(cls, field) is getattr(algorithm, field), field
    assert cls.name() == algorithm.label
    state_fields = {f.name for f in dataclasses.fields(algorithm.family.state_cls)}
    assert {"key", "agent_state", "iteration"} <= state_fields  # what the host loop reads of any state


@pytest.mark.parametrize("name", NAMES)
def test_the_agent_section_is_the_records_factory_keywords(name):
    algorithm = resolve_workflow_cls(f"evorl.workflows.{name}").algorithm
    factory = inspect.signature(algorithm.agent_factory).parameters
    assert set(algorithm.training_hparams) | set(algorithm.section_hparams) <= set(factory)
    section = fields_of(algorithm.agent_config_cls)
    assert not set(section) & (set(algorithm.training_hparams) | set(algorithm.section_hparams))
    if algorithm.agent_section is None:
        derived = dataclass_from_signature(
            "Derived", algorithm.agent_factory, include=algorithm.agent_options_cls,
            exclude=("action_space", "obs_space", "network_factory", *algorithm.training_hparams,
                     *algorithm.section_hparams))
        assert section == fields_of(derived)
    if algorithm.hparams_cls is not None:  # each hyperparameter is a key of one section, or a constant (DDPG's)
        for field in dataclasses.fields(algorithm.hparams_cls):
            if field.name not in factory:
                assert field.default is not dataclasses.MISSING, field.name
                continue
            assert (field.name in section) + (field.name in algorithm.training_hparams) \
                + (field.name in algorithm.section_hparams) == 1, field.name


def test_a_variant_made_with_replace_derives_its_own_agent_section():
    assert "target_noise" in fields_of(TD3.agent_config_cls)
    assert "target_noise" not in fields_of(DDPG.agent_config_cls)
    assert DDPG.family is TD3.family and DDPG.agent_config_cls.__name__ == "DDPGAgentConfig"
    mappo = resolve_workflow_cls("evorl.workflows.MAPPOWorkflow").agent_config_cls
    assert fields_of(mappo)["centralised_critic"][1] is True


def test_a_workflow_that_declares_a_record_field_itself_is_refused():
    with pytest.raises(TypeError, match="declares hparams_cls: an algorithm declares them once, in its record"):
        class Declares(PPOWorkflow):  # noqa: F841
            hparams_cls = None
