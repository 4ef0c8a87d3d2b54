"""The served models and their versions, for every protocol.

KServe registers a model's latest version under its name and the others
as `name@version`; clients name a model and, optionally, a version (a
number) or a version label. `lookup` finds the registered model, or
says in `NotServed` what is served; each protocol (TensorFlow Serving's
REST version routes, its gRPC `model_spec`, KServe v2's routes) turns
that into its own 404 or NOT_FOUND.

`Registry` is the one table of what is served now: the version watcher
(`keras_attn_cli.serving.versions`) changes it, on the event loop, and
every protocol reads it there, so that REST, gRPC, KServe v2 and OpenAI
see the same versions at the same moment.
"""

from collections.abc import Mapping


class NotServed(LookupError):
    """A model, version or label that is not served; the message says
    what is."""


def key_of(name, version, latest):
    """The registered name of `name`'s `version` when `latest` is its
    newest served version."""
    return name if version == latest else f"{name}@{version}"


def version_table(models):
    """`{name: {version: registered name}}` of the served models
    (`{registered name: ServedModel}`)."""
    table = {}
    for key, model in models.items():
        table.setdefault(model.public_name, {})[str(model.version)] = key
    return table


def lookup(table, name, version=None, label=None, labels=None):
    """The registered name of model `name` at `version` (a number, as
    text or int; `None`: the latest) or at `label` (one of `labels`,
    `{name: {label: version}}`), from `version_table`'s `table`; a
    `NotServed` for an unknown model, version or label."""
    if name not in table:
        raise NotServed(f"Unknown model {name!r}; served: {sorted(table)}")
    served = table[name]
    numbers = sorted(int(v) for v in served)
    if label:
        named = (labels or {}).get(name, {})
        if label not in named:
            raise NotServed(
                f"Model {name!r} has no version label {label!r}; served: "
                f"versions {numbers}, labels {sorted(named)}"
            )
        version = named[label]
        if str(version) not in served:
            raise NotServed(
                f"Model {name!r}'s label {label!r} names version {version}, "
                f"which is not served; served: versions {numbers}"
            )
    if version is None:
        return served[str(max(numbers))]
    if str(version) not in served:
        raise NotServed(
            f"Model {name!r} has no version {str(version)!r}; served: "
            f"versions {numbers}"
        )
    return served[str(version)]


class Registry(Mapping):
    """`{registered name: ServedModel}` of what is served now, with the
    versions that failed to load (`failed`, `{name: {version: message}}`)
    and the version labels (`labels`, `{name: {label: version}}`).

    `replace(name, versions)` swaps a model's whole set of versions at
    once: the latest is registered as `name`, the others as
    `name@version`, and each listener (`listeners`: `(removed keys,
    {added key: model})`, such as KServe's repository) hears of it.
    Change it on the event loop only: the protocols read it there."""

    def __init__(self, models=()):
        self._models = dict(models)
        self.failed = {}
        self.labels = {}
        self.listeners = []

    def __getitem__(self, key):
        return self._models[key]

    def __iter__(self):
        return iter(self._models)

    def __len__(self):
        return len(self._models)

    def table(self):
        return version_table(self._models)

    def key(self, name, version=None, label=None):
        """The registered name of `name` at `version` or `label` (see
        `lookup`)."""
        return lookup(self.table(), name, version, label, self.labels)

    def find(self, name, version=None, label=None):
        """The model `name` at `version` or `label` (see `lookup`)."""
        return self._models[self.key(name, version, label)]

    def versions(self, name):
        """`{version: ServedModel}` of `name`, as served now."""
        return {
            m.version: m for m in self._models.values() if m.public_name == name
        }

    def replace(self, name, versions):
        """Serve `versions` (`{version: ServedModel}`, possibly empty:
        `name` is no longer served) as `name`'s, in one step."""
        removed = [k for k, m in self._models.items() if m.public_name == name]
        for key in removed:
            del self._models[key]
        added = {}
        latest = max(versions, default=None)
        for version, model in sorted(versions.items()):
            key = key_of(name, version, latest)
            model.name = key  # KServe's name: the v2 answers carry it
            self._models[key] = added[key] = model
        for listener in self.listeners:
            listener(removed, added)
