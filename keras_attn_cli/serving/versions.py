"""Which versions of each model are served, kept in step with the disk
as TensorFlow Serving keeps them.

A model's `Source` is a base folder of numbered versions (`MODEL/1/`,
`MODEL/2/`) with a version policy (`latest`, `latest:N`, `all`, or
versions by number), or one artifact served as version 1. The
`Watcher` loads what each policy wants at start, then polls the folders
(and, when one is given, TensorFlow Serving's model config file, which
adds and removes models):

- a new version is loaded (its signature checked, where one is required,
  before anything of it is read; then the opener's trust rules) and
  warmed up off the event loop, and only then swapped in, in one step on
  the loop, for every protocol at once (`registry.Registry.replace`);
  the versions the policy no longer wants leave in the same step, and
  the requests already holding one finish on it;
- a folder still being written (its files changed over the settling
  time) waits for the next poll; a version that fails to load is one
  WARNING line and an END state with the error in the status, tried
  again once its files change, and what was serving goes on serving;
- a removed version is unloaded; a model whose versions are all removed,
  or that the config file drops, is no longer served.
"""

import asyncio
import dataclasses
import os

from keras_attn_cli.serving.limits import LOGGER
from keras_attn_runtime.opener import find

# How long a new version's files must stay unchanged before it is read:
# a folder renamed into place passes at once; one copied in place waits
# for its copy to end (and its load is tried again if it changes after).
SETTLE_S = 0.2
POLICIES = "latest, latest:N, all, or version numbers N,M"


@dataclasses.dataclass
class Source:
    """Where model `name`'s versions come from: `base`, a folder of
    numbered versions, with `policy` (`parse_policy`'s); or `fixed`,
    `{version: artifact path}`, read once. `labels`: `{label: version}`
    (TensorFlow Serving's `version_labels`)."""

    name: str
    base: str = None
    policy: tuple = ("latest", 1)
    fixed: dict = None
    labels: dict = dataclasses.field(default_factory=dict)


def parse_policy(text, flag="--model-versions"):
    """`("latest", n)`, `("all", None)` or `("specific", frozenset)` of
    `text` (`latest`, `latest:N`, `all`, `N,M`); a `ValueError` naming
    `flag` otherwise."""
    text = str(text).strip()
    try:
        if text == "all":
            return "all", None
        if text == "latest" or text.startswith("latest:"):
            count = int(text.partition(":")[2] or 1)
            if count > 0:
                return "latest", count
        else:
            numbers = frozenset(int(v) for v in text.split(","))
            if numbers and min(numbers) >= 0:
                return "specific", numbers
    except ValueError:
        pass
    raise ValueError(
        f"Expected {flag} to be {POLICIES}. Received: {flag}={text}"
    )


def pick(numbers, policy):
    """The versions of `numbers` that `policy` serves."""
    kind, value = policy
    numbers = sorted(numbers)
    if kind == "latest":
        return set(numbers[-value:])
    if kind == "all":
        return set(numbers)
    return set(numbers) & set(value)


def numbered(base):
    """`{version: folder}` of `base`'s numbered subfolders (other
    entries, such as a version being copied under a hidden name, are
    not versions)."""
    try:
        entries = os.listdir(base)
    except OSError:
        return {}
    return {
        int(entry): os.path.join(base, entry)
        for entry in entries
        if entry.isdigit() and os.path.isdir(os.path.join(base, entry))
    }


def snapshot(folder):
    """What a version's files are now: each one's path, size and time
    of change (a copy in progress changes it)."""
    found = []
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            try:
                info = os.stat(path)
            except OSError:  # removed while read: changing
                continue
            found.append((path, info.st_size, info.st_mtime_ns))
    return tuple(sorted(found))


class Watcher:
    """Keeps `registry` (`keras_attn_cli.serving.registry.Registry`)
    serving what `sources` (`{name: Source}`) hold.

    Args:
        registry: the served models, changed only on the event loop.
        sources: `{name: Source}` to serve.
        load: `load(source, version, path) -> ServedModel`, loaded,
            checked and warmed up (run on a worker thread).
        log: where the swaps are told (one line each).
        poll_s: seconds between polls of the version folders (0: read
            once, at start).
        config: `(read, poll_s)`: `read() -> {name: Source}` reads the
            model config file again (a `ValueError` keeps what is served)
            every `poll_s` seconds (0: never again); or `None`.
    """

    def __init__(self, registry, sources, load, log, poll_s=1.0, config=None):
        self.registry, self.sources, self.load = registry, dict(sources), load
        self.log, self.poll_s, self.config = log, poll_s, config
        self.failed = {}  # {(name, version): snapshot that failed}
        self.settle_s = SETTLE_S

    def start(self):
        """Load what every source wants now (before serving, on this
        thread): a failure raises, and nothing is served."""
        for source in self.sources.values():
            versions = self._wanted(source)
            if source.fixed is None and not versions:
                raise ValueError(
                    f"Expected {source.base!r} to hold a version the policy "
                    f"serves ({_policy_text(source.policy)}). Received: "
                    f"versions {sorted(numbered(source.base))}"
                )
            loaded = {
                v: self.load(source, v, path) for v, path in versions.items()
            }
            self._swap(source, loaded)

    async def run(self):
        """Poll until cancelled. A round that fails is one ERROR line, and
        the next round comes as usual (the task never ends by itself,
        leaving the disk unwatched)."""
        config_poll = self.config[1] if self.config else 0
        waited = 0.0
        while self.poll_s > 0 or config_poll > 0:
            step = min(s for s in (self.poll_s, config_poll) if s > 0)
            await asyncio.sleep(step)
            waited += step
            try:
                if config_poll > 0 and waited >= config_poll:
                    waited = 0.0
                    await self.reread_config()
                if self.poll_s > 0:
                    await self.poll()
            except Exception as err:  # noqa: BLE001 (one line, go on)
                LOGGER.error(
                    "a look at the model folders failed, trying again: %s",
                    " ".join(str(err).split()) or type(err).__name__,
                )

    async def reread_config(self):
        """The config file again: models added are loaded, models gone
        are no longer served; an unreadable file changes nothing."""
        read, _ = self.config
        try:
            sources = await asyncio.to_thread(read)
        except ValueError as err:
            LOGGER.warning("model config file not read again: %s", err)
            return
        for name in set(self.sources) - set(sources):
            self.sources.pop(name)
            self.registry.failed.pop(name, None)
            self.registry.labels.pop(name, None)
            self.registry.replace(name, {})
            self.log(f"{name}: no longer in the model config file, unloaded")
        for name, source in sources.items():
            old = self.sources.get(name)
            if old != source:
                if old is not None and (old.base, old.fixed) != (
                    source.base,
                    source.fixed,
                ):  # moved: its versions anew
                    self.registry.replace(name, {})
                self.sources[name] = source
                self.registry.labels[name] = dict(source.labels)
                if source.fixed is not None and not self.registry.versions(
                    name
                ):
                    await self._load_fixed(source)
        await self.poll()

    async def poll(self):
        """One look at every watched folder: new versions loaded and
        swapped in, versions gone (or no longer wanted) unloaded."""
        for source in list(self.sources.values()):
            if source.base is not None:
                await self._poll_source(source)

    async def _load_fixed(self, source):
        try:
            loaded = {
                v: await asyncio.to_thread(self.load, source, v, path)
                for v, path in source.fixed.items()
            }
        except Exception as err:  # noqa: BLE001 (one line, then serving)
            self._failed(source, 1, err, ())
            return
        self._swap(source, loaded)

    async def _poll_source(self, source):
        found = await asyncio.to_thread(numbered, source.base)
        wanted = {v: found[v] for v in pick(found, source.policy)}
        current = self.registry.versions(source.name)
        new = {}
        for version, path in sorted(wanted.items()):
            if version in current:
                continue
            seen = await asyncio.to_thread(snapshot, path)
            if self.failed.get((source.name, version)) == seen:
                continue  # failed as it is: tried again once it changes
            await asyncio.sleep(self.settle_s)
            if await asyncio.to_thread(snapshot, path) != seen:
                continue  # still being written
            try:
                new[version] = await asyncio.to_thread(
                    self.load, source, version, path
                )
            except Exception as err:  # noqa: BLE001 (one line, then serving)
                self._failed(source, version, err, seen)
        for key in [k for k in self.failed if k[0] == source.name]:
            if key[1] not in found:  # gone from the disk: forgotten
                self.failed.pop(key)
                self.registry.failed.get(source.name, {}).pop(key[1], None)
        serving = {v: m for v, m in current.items() if v in wanted}
        serving.update(new)
        if not serving and wanted:
            serving = current  # nothing new loaded: what served goes on
        if serving.keys() != current.keys():
            self._swap(source, serving)

    def _wanted(self, source):
        if source.fixed is not None:
            return dict(source.fixed)
        found = numbered(source.base)
        return {v: found[v] for v in sorted(pick(found, source.policy))}

    def _failed(self, source, version, err, seen):
        message = " ".join(str(err).split()) or type(err).__name__
        self.failed[(source.name, version)] = seen
        self.registry.failed.setdefault(source.name, {})[version] = message
        LOGGER.warning(
            "%s version %s not loaded, still serving %s: %s",
            source.name,
            version,
            sorted(self.registry.versions(source.name)) or "nothing",
            message,
        )

    def _swap(self, source, versions):
        self.registry.labels[source.name] = dict(source.labels)
        for version in versions:
            self.registry.failed.get(source.name, {}).pop(version, None)
            self.failed.pop((source.name, version), None)
        before = sorted(self.registry.versions(source.name))
        self.registry.replace(source.name, versions)
        if before:
            self.log(
                f"{source.name}: serving versions {sorted(versions)} "
                f"(was {before})"
            )


def _policy_text(policy):
    kind, value = policy
    if kind == "latest":
        return "latest" if value == 1 else f"latest:{value}"
    if kind == "all":
        return "all"
    return ",".join(str(v) for v in sorted(value))


def read_model_config(path, flag="--model-config-file"):
    """`{name: Source}` of TensorFlow Serving's model config file at
    `path` (a `ModelServerConfig` in protobuf's text format, its
    `model_config_list`: each model's `name`, `base_path`,
    `model_version_policy` and `version_labels`); a `ValueError` naming
    `flag` for a file that cannot be read as one."""
    from google.protobuf import text_format

    try:
        from tensorflow_serving.config import model_server_config_pb2
    except ImportError:
        raise ValueError(
            f"{flag} needs TensorFlow Serving's protos: pip install --no-deps "
            "'tensorflow-serving-api>=2.21,<2.22'"
        ) from None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        config = text_format.Parse(
            text, model_server_config_pb2.ModelServerConfig()
        )
    except (OSError, UnicodeDecodeError, text_format.ParseError) as err:
        raise ValueError(
            f"Could not read {flag}={path!r} as TensorFlow Serving's model "
            f"config: {' '.join(str(err).split())}"
        ) from None
    if config.WhichOneof("config") == "custom_model_config":
        raise ValueError(
            f"Expected {flag} to hold a model_config_list. Received: "
            f"custom_model_config in {flag}={path!r}"
        )
    sources = {}
    for entry in config.model_config_list.config:
        where = f"model {entry.name!r} of {flag}={path!r}"
        if not entry.name or not entry.base_path:
            raise ValueError(f"Expected a name and a base_path for {where}")
        if entry.name in sources:
            raise ValueError(
                f"Expected each model once. Received: {where} twice"
            )
        base = os.path.abspath(entry.base_path)  # as TensorFlow Serving
        sources[entry.name] = _config_source(entry, base, where)
    return sources


def _config_source(entry, base, where):
    policy = entry.model_version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        chosen = ("all", None)
    elif choice == "specific":
        if not policy.specific.versions:
            raise ValueError(
                f"Expected versions in the specific policy of {where}"
            )
        chosen = ("specific", frozenset(policy.specific.versions))
    else:  # latest, TensorFlow Serving's default: one version
        chosen = ("latest", max(policy.latest.num_versions, 1))
    labels = dict(entry.version_labels)
    if not numbered(base) and find(base) is not None:  # one model file
        return Source(entry.name, fixed={1: base}, labels=labels)
    return Source(entry.name, base, chosen, labels=labels)
