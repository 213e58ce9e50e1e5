"""``brax.envs`` as PureJaxRL's wrappers.py imports it; building a brax env needs the real brax."""


def get_environment(name, **kwargs):
    raise ImportError(f"brax is not installed: cannot build {name!r} (this is a stand-in for imports only)")
