"""Reading perf.yml so that every problem names its key: the checked walk over the parsed YAML
(KeyReader) and a YAML loader that refuses a key given twice. mlagate/config/__init__.py says what the keys are."""

import math

import yaml


class ConfigError(ValueError):
    """perf.yml is missing, unreadable or invalid; the message names the key."""


class KeyReader:
    """Walks the raw YAML and turns every problem into a ConfigError naming its key."""

    def __init__(self, data, path=""):
        self.data, self.path = data, path

    def _key(self, key):
        return f"{self.path}.{key}" if self.path else key

    def section(self, key, allowed) -> "KeyReader":
        value = self.data.get(key) if isinstance(self.data, dict) else None
        return KeyReader.mapping(value, self._key(key), allowed)

    @classmethod
    def mapping(cls, value, path: str, allowed, required=()) -> "KeyReader":
        """``value`` (found at ``path``) as a mapping of names among ``allowed``, holding every key of
        ``required``: a section, or one entry of a list."""
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: must be a mapping, got {type(value).__name__}")
        for k in value:  # open sections take their keys as names (arch): `90:` would read as an int
            if not isinstance(k, str):
                raise ConfigError(f"{path}.{k}: keys must be names (strings), got {type(k).__name__}")
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            raise ConfigError(f"{path}.{unknown[0]}: unknown key (allowed: {', '.join(allowed)})")
        for k in required:
            if k not in value:
                raise ConfigError(f"{path}.{k}: missing")
        return cls(value, path)

    def get(self, key, kind, *, minimum=None, maximum=None, exclusive_min=False):
        if key not in self.data:
            raise ConfigError(f"{self._key(key)}: missing")
        value = self.data[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            try:
                value = float(value)
            except OverflowError:
                raise ConfigError(f"{self._key(key)}: must be a finite number, got an integer too large "
                                  "for a float") from None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{self._key(key)}: must be {kind.__name__}, got {value!r}")
        if kind is float and not math.isfinite(value):  # NaN passes every comparison below
            raise ConfigError(f"{self._key(key)}: must be a finite number, got {value!r}")
        if minimum is not None and (value <= minimum if exclusive_min else value < minimum):
            rule = f"> {minimum}" if exclusive_min else f">= {minimum}"
            raise ConfigError(f"{self._key(key)}: must be {rule}, got {value!r}")
        if maximum is not None and value > maximum:
            raise ConfigError(f"{self._key(key)}: must be <= {maximum}, got {value!r}")
        return value

    def _list(self, key) -> list:
        values = self.data.get(key)
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{self._key(key)}: must be a non-empty list, got {values!r}")
        return values

    def _unique(self, key, values) -> tuple:
        if len(set(values)) != len(values):
            raise ConfigError(f"{self._key(key)}: entries must be unique, got {values!r}")
        return tuple(values)

    def int_list(self, key, minimum=1, choices=None, *, maximum=None, multiple_of=None):
        values = self._list(key)
        for v in values:
            if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
                raise ConfigError(f"{self._key(key)}: every entry must be an integer >= {minimum}, got {v!r}")
            if choices and v not in choices:
                raise ConfigError(f"{self._key(key)}: {v} is not one of {', '.join(map(str, choices))}")
            if maximum is not None and v > maximum:
                raise ConfigError(f"{self._key(key)}: every entry must be <= {maximum}, got {v}")
            if multiple_of and v % multiple_of:
                raise ConfigError(f"{self._key(key)}: every entry must be a multiple of {multiple_of}, got {v}")
        return self._unique(key, values)

    def name_list(self, key):
        values = self._list(key)
        for v in values:
            if not isinstance(v, str):
                raise ConfigError(f"{self._key(key)}: every entry must be a name, got {v!r}")
        return self._unique(key, values)

    def choice_list(self, key, choices):
        values = self._list(key)
        for v in values:
            if v not in choices:
                raise ConfigError(f"{self._key(key)}: {v!r} is not one of {', '.join(choices)}")
        return self._unique(key, values)


def open_section_keys(section) -> tuple:
    """The keys of an open section (any arch name), or none when it is not a mapping (section() says so)."""
    return tuple(section) if isinstance(section, dict) else ()


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a key given twice in one mapping is an error (PyYAML keeps
    the last value silently, so a second `threshold:` further down would win unseen)."""

    def construct_document(self, node):
        self._check_unique(node, "", set())
        return super().construct_document(node)

    def _check_unique(self, node, path, visited):
        if id(node) in visited:  # an alias: checked where its anchor is (and it may be recursive)
            return
        visited.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for item in node.value:
                self._check_unique(item, path, visited)
        if not isinstance(node, yaml.MappingNode):
            return
        seen = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` merges; its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=True) if isinstance(key_node, yaml.ScalarNode) else None
            name = f"{path}.{key}" if path else str(key)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise ConfigError(f"{name}: duplicate key at line {line} (first at line {seen[key]})")
            seen.setdefault(key, line)
            self._check_unique(value_node, name, visited)
