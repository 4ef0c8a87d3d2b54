"""The served models and their versions, for every protocol.

KServe registers a model's latest version under its name and the others
as `name@version`; clients name a model and, optionally, a version (a
number) or a version label. `lookup` finds the registered model, or
says in `NotServed` what is served; each protocol (TensorFlow Serving's
REST version routes, its gRPC `model_spec`, KServe v2's routes) turns
that into its own 404 or NOT_FOUND.
"""


class NotServed(LookupError):
    """A model, version or label that is not served; the message says
    what is."""


def version_table(models):
    """`{name: {version: registered name}}` of the served models
    (`{registered name: ServedModel}`)."""
    table = {}
    for key, model in models.items():
        table.setdefault(model.public_name, {})[str(model.version)] = key
    return table


def lookup(table, name, version=None, label=None):
    """The registered name of model `name` at `version` (a number, as
    text or int; `None`: the latest), from `version_table`'s `table`; a
    `NotServed` for an unknown model, version, or any version label (none
    is served)."""
    if name not in table:
        raise NotServed(f"Unknown model {name!r}; served: {sorted(table)}")
    served = table[name]
    numbers = sorted(int(v) for v in served)
    if label:
        raise NotServed(
            f"Model {name!r} has no version label {label!r}; served: "
            f"versions {numbers}"
        )
    if version is None:
        return served[str(max(numbers))]
    if str(version) not in served:
        raise NotServed(
            f"Model {name!r} has no version {str(version)!r}; served: "
            f"versions {numbers}"
        )
    return served[str(version)]
