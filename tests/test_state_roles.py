"""State-field roles are declared on the state's own fields: the sets PBT, the divergence
freeze, the actor-learner, the ``envs`` layout and the checkpoints read are these, written
out here as the reference."""

from __future__ import annotations

import pytest
from flax import struct

from evorl.algorithms.cemrl import CEMRLState, CEMRLWorkflow
from evorl.algorithms.erl import ERLState, ERLWorkflow
from evorl.algorithms.es import ESState
from evorl.algorithms.nsga2 import NSGA2State
from evorl.engine.off_policy_workflow import OffPolicyWorkflow
from evorl.engine.on_policy_workflow import OnPolicyWorkflow
from evorl.rl import replay
from evorl.rl.off_policy import OffPolicyState
from evorl.rl.on_policy import OnPolicyState
from evorl.rl.state_roles import ROLES, buffer_field, env_axes, fields_with_role, role_field

NONE = set()
#: state -> role -> the fields with that role (as the per-module tuples named them).
REFERENCE = {
    OnPolicyState: {
        "env": {"env_state", "policy_state"},
        "actor": {"env_state", "policy_state"},
        "frozen": {"agent_state", "opt_state", "lagged_params"},
        "pbt_copy": {"agent_state", "opt_state", "learning_rate", "lagged_params"},
        "pbt_keep": {"env_state", "policy_state", "fitness_episodes"},
        "buffer": NONE,
        "from_config": {"anneal_iterations"},
    },
    OffPolicyState: {
        "env": {"env_state", "buffer"},
        "actor": {"env_state"},
        "frozen": {"agent_state", "opt_state", "target_params", "lagged_params"},
        "pbt_copy": {"agent_state", "opt_state", "target_params", "learning_rate", "lagged_params"},
        "pbt_keep": {"env_state", "buffer", "fitness_episodes"},
        "buffer": {"buffer"},
        "from_config": {"anneal_iterations"},
    },
    ESState: {"pbt_copy": {"agent_state", "search"}, "pbt_keep": {"fitness_episodes"}},
    CEMRLState: {"buffer": {"buffer"}},
    ERLState: {"buffer": {"buffer"}},
    NSGA2State: {},
}


@pytest.mark.parametrize("state_cls", list(REFERENCE), ids=lambda c: c.__name__)
def test_each_state_declares_the_fields_of_each_role(state_cls):
    for role in ROLES:
        assert set(fields_with_role(state_cls, role)) == REFERENCE[state_cls].get(role, NONE), role


def test_env_axes_split_the_environments_and_the_buffers_columns():
    assert env_axes(OnPolicyState) == {"env_state": 0, "policy_state": 0}
    assert env_axes(OffPolicyState) == {"env_state": 0,
                                        "buffer": replay.ReplayBuffer(data=1, position=None, size=None)}
    assert env_axes(ESState) == {} and env_axes(CEMRLState) == {}


def test_the_workflows_replay_buffer_is_the_field_of_their_state():
    assert OnPolicyWorkflow.replay_buffer_field is None
    assert OffPolicyWorkflow.replay_buffer_field == "buffer"
    assert CEMRLWorkflow.replay_buffer_field == ERLWorkflow.replay_buffer_field == "buffer"


def test_an_instance_reads_as_its_class_and_a_bad_role_is_refused():
    @struct.dataclass
    class State:
        a: int = role_field("frozen", "pbt_copy")
        b: int = role_field("buffer")
        c: int = 0

    assert fields_with_role(State(1, 2), "frozen") == ("a",) and buffer_field(State(1, 2)) == "b"
    with pytest.raises(ValueError, match="unknown state field role 'frozn'"):
        fields_with_role(State, "frozn")
    with pytest.raises(ValueError, match=r"unknown state field role\(s\) \['copy'\]"):
        role_field("copy")
    with pytest.raises(ValueError, match="env_axis applies to a field with the 'env' role"):
        role_field("buffer", env_axis=1)

    @struct.dataclass
    class TwoBuffers:
        a: int = role_field("buffer")
        b: int = role_field("buffer")

    with pytest.raises(ValueError, match="TwoBuffers marks 2 fields as its replay buffer"):
        buffer_field(TwoBuffers)
