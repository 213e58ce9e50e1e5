"""Envs that cannot be built or stepped here, and env keywords that cannot be right: refused
while the config is checked (:meth:`evorl.config.env.EnvConfig.validate`), before any package
is imported or env built, each in one line saying why.

* brax envs with fluid drag (swimmer) on a brax whose ``fluid.py`` calls
  ``jnp.clip(a_min=...)``, which jax 0.10 removed (read from the files, nothing imported);
* envs that download a data set when built (gymnax's ``MNISTBandit-bsuite``), unless its
  files are already where the env reads them;
* JaxMARL agent counts below 1 (the unknown keywords and absurd counts need JaxMARL itself:
  :func:`evorl.envs.jaxmarl_env.jaxmarl_step_size`, before the memory estimate).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from evorl.config.errors import ConfigError

#: brax envs whose model sets ``viscosity`` or ``density`` (``<option>`` in its XML): stepped
#: by brax's fluid model on the generalized backend, their only one.
BRAX_FLUID_ENVS = ("swimmer",)
#: gymnax envs that download data when built: ``{name: (what, folder, files)}``.
DOWNLOADING_ENVS = {
    "MNISTBandit-bsuite": ("the MNIST data set from storage.googleapis.com/cvdf-datasets/mnist/", "/tmp/mnist",
                           ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                            "t10k-labels-idx1-ubyte.gz")),
}
#: JaxMARL keywords that count agents.
AGENT_COUNT_KWARGS = ("num_agents", "num_allies", "num_enemies")


def _version(package: str) -> tuple[int, ...]:
    try:
        text = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ()
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def brax_fluid_refusal(env_name: str) -> str | None:
    """Why brax cannot step ``env_name`` with this jax (None: it can, or brax is absent)."""
    spec = importlib.util.find_spec("brax") if env_name in BRAX_FLUID_ENVS else None
    if spec is None or not spec.submodule_search_locations or _version("jax") < (0, 10):
        return None
    fluid = Path(list(spec.submodule_search_locations)[0]) / "fluid.py"
    if not fluid.is_file() or "a_min=" not in fluid.read_text():
        return None
    return (f"brax {importlib.metadata.version('brax')} cannot step {env_name!r} with jax "
            f"{importlib.metadata.version('jax')}: its fluid model (brax/fluid.py) calls jnp.clip(a_min=...), which "
            f"jax 0.10 removed. This is a brax bug; use a brax release that fixes it or another env.")


def check_buildable(env_type: str, env_name: str, kwargs: dict, where: str = "env") -> None:
    """A ConfigError for an env that cannot be built or stepped here (module docstring)."""
    if env_type == "brax":
        refusal = brax_fluid_refusal(env_name)
        if refusal:
            raise ConfigError(f"{where}.env_name={env_name}: {refusal}")
    if env_type == "gymnax" and env_name in DOWNLOADING_ENVS:
        what, folder, files = DOWNLOADING_ENVS[env_name]
        missing = [name for name in files if not (Path(folder) / name).is_file()]
        if missing:
            raise ConfigError(f"{where}.env_name={env_name}: gymnax's {env_name} downloads {what} into {folder} when "
                              f"it is built, and {folder} lacks {', '.join(missing)}; put those files there first "
                              f"(or use another env).")
    if env_type == "jaxmarl":
        for key in AGENT_COUNT_KWARGS:
            value = kwargs.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{where}.kwargs.{key} must be an integer >= 1, got {value!r}.")
