"""The wrapper names PureJaxRL's wrappers.py imports; using one needs the real brax."""


class _NeedsBrax:
    def __init__(self, *args, **kwargs):
        raise ImportError("brax is not installed (this is a stand-in for imports only)")


class EpisodeWrapper(_NeedsBrax):
    pass


class AutoResetWrapper(_NeedsBrax):
    pass
