"""The version watcher of `keras-attn serve` on its own
(`keras_attn_cli.serving.versions`), with stand-in models and no
server: the policies, a new version swapped in whole, a failed one in
the status while the rest serves, a folder still being written left for
the next poll, removals, and TensorFlow Serving's model config file."""

import asyncio
import logging
import os
import types

import pytest

from keras_attn_cli.serving import registry, versions


def version(base, number, text="ok"):
    """`base/number/model.bin`, written whole under a hidden name and
    renamed into place, as the docs say to place one."""
    hidden = os.path.join(base, f".{number}.partial")
    os.makedirs(hidden)
    with open(os.path.join(hidden, "model.bin"), "w") as f:
        f.write(text)
    os.rename(hidden, os.path.join(base, str(number)))


def stand_in_load(source, number, path):
    """A stand-in model of the folder `path`: its text, or a failure for
    a folder that says `broken`."""
    with open(os.path.join(path, "model.bin")) as f:
        text = f.read()
    if text == "broken":
        raise ValueError(f"{path}: not a model")
    return types.SimpleNamespace(
        public_name=source.name, version=number, text=text, name=None
    )


def watcher_of(base, policy=("latest", 1), **settings):
    models = registry.Registry()
    heard = []
    models.listeners.append(
        lambda removed, added: heard.append((removed, added))
    )
    source = versions.Source("m", str(base), policy)
    watcher = versions.Watcher(
        models, {"m": source}, stand_in_load, lambda line: None, **settings
    )
    watcher.settle_s = 0
    return watcher, models, heard


@pytest.mark.parametrize(
    "text, policy",
    [
        ("latest", ("latest", 1)),
        ("latest:3", ("latest", 3)),
        ("all", ("all", None)),
        ("2,1", ("specific", frozenset({1, 2}))),
    ],
)
def test_policies_read_as_tensorflow_servings(text, policy):
    assert versions.parse_policy(text) == policy


@pytest.mark.parametrize("text", ["latest:0", "latest:x", "newest", "1,,2", ""])
def test_a_policy_that_is_none_names_the_flag(text):
    with pytest.raises(ValueError, match=f"--model-versions={text}$"):
        versions.parse_policy(text)


def test_each_policy_picks_its_versions():
    found = [1, 2, 5, 7]
    assert versions.pick(found, ("latest", 1)) == {7}
    assert versions.pick(found, ("latest", 2)) == {5, 7}
    assert versions.pick(found, ("all", None)) == set(found)
    assert versions.pick(found, ("specific", frozenset({2, 3}))) == {2}


def test_only_numbered_folders_are_versions(tmp_path):
    version(tmp_path, 1)
    (tmp_path / "notes").mkdir()
    (tmp_path / "3").write_text("a file, not a folder")
    (tmp_path / ".2.partial").mkdir()
    assert versions.numbered(str(tmp_path)) == {1: str(tmp_path / "1")}


def test_a_new_version_is_swapped_in_whole_and_the_old_retired(tmp_path):
    version(tmp_path, 1, "one")
    watcher, models, heard = watcher_of(tmp_path)
    watcher.start()
    assert models.find("m").text == "one" and list(models) == ["m"]
    version(tmp_path, 2, "two")
    asyncio.run(watcher.poll())
    assert models.find("m").text == "two"
    assert sorted(models) == ["m"]  # latest: one version
    # One step told every listener: the old key gone, the new one in.
    removed, added = heard[-1]
    assert removed == ["m"] and list(added) == ["m"]
    assert added["m"].version == 2 and added["m"].name == "m"


def test_all_versions_are_served_under_their_numbers(tmp_path):
    version(tmp_path, 1, "one")
    watcher, models, _ = watcher_of(tmp_path, ("all", None))
    watcher.start()
    version(tmp_path, 2, "two")
    asyncio.run(watcher.poll())
    assert sorted(models) == ["m", "m@1"]
    assert models.find("m", version=1).text == "one"
    assert models.find("m").text == "two"


def test_a_failed_version_is_in_the_status_and_the_rest_serves(
    tmp_path, caplog
):
    version(tmp_path, 1, "one")
    watcher, models, heard = watcher_of(tmp_path)
    watcher.start()
    swaps = len(heard)
    version(tmp_path, 2, "broken")
    with caplog.at_level(logging.WARNING):
        asyncio.run(watcher.poll())
    assert models.find("m").text == "one" and len(heard) == swaps
    assert "not a model" in models.failed["m"][2]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "m version 2 not loaded" in lines[0]
    # Tried again only once its files change: no second line meanwhile.
    with caplog.at_level(logging.WARNING):
        asyncio.run(watcher.poll())
    assert len(caplog.records) == 1
    (tmp_path / "2" / "model.bin").write_text("fixed")
    os.utime(tmp_path / "2" / "model.bin", ns=(1, 1))
    asyncio.run(watcher.poll())
    assert models.find("m").text == "fixed" and "m" not in {
        k for k, v in models.failed.items() if v
    }


def test_a_folder_still_being_written_waits_for_the_next_poll(
    tmp_path, monkeypatch
):
    version(tmp_path, 1, "one")
    watcher, models, _ = watcher_of(tmp_path)
    watcher.start()
    version(tmp_path, 2, "two")
    looks = iter(range(1000))
    real = versions.snapshot
    monkeypatch.setattr(  # each look finds it changed
        versions, "snapshot", lambda folder: (real(folder), next(looks))
    )
    asyncio.run(watcher.poll())
    assert models.find("m").text == "one" and not models.failed
    monkeypatch.setattr(versions, "snapshot", real)
    asyncio.run(watcher.poll())
    assert models.find("m").text == "two"


def test_removed_versions_are_unloaded(tmp_path):
    import shutil

    version(tmp_path, 1, "one")
    version(tmp_path, 2, "two")
    watcher, models, _ = watcher_of(tmp_path, ("all", None))
    watcher.start()
    shutil.rmtree(tmp_path / "2")
    asyncio.run(watcher.poll())
    assert list(models) == ["m"] and models.find("m").text == "one"
    shutil.rmtree(tmp_path / "1")
    asyncio.run(watcher.poll())
    assert not models
    with pytest.raises(registry.NotServed, match="Unknown model 'm'"):
        models.find("m")


def test_a_folder_with_no_version_the_policy_serves_is_refused_at_start(
    tmp_path,
):
    version(tmp_path, 1)
    watcher, _, _ = watcher_of(tmp_path, ("specific", frozenset({4})))
    with pytest.raises(ValueError, match=r"policy serves \(4\)"):
        watcher.start()


CONFIG = """
model_config_list {{
  config {{
    name: "first"
    base_path: "{first}"
    model_platform: "tensorflow"
    model_version_policy {{ all {{}} }}
    version_labels {{ key: "stable" value: 1 }}
    version_labels {{ key: "canary" value: 2 }}
  }}
  config {{
    name: "second"
    base_path: "{second}"
    model_version_policy {{ specific {{ versions: 1 }} }}
  }}
}}
"""


def test_a_tensorflow_serving_config_file_is_read_unchanged(tmp_path):
    pytest.importorskip("tensorflow_serving")
    path = tmp_path / "models.config"
    path.write_text(CONFIG.format(first=tmp_path / "a", second=tmp_path / "b"))
    sources = versions.read_model_config(str(path))
    assert sources["first"] == versions.Source(
        "first",
        str(tmp_path / "a"),
        ("all", None),
        labels={"stable": 1, "canary": 2},
    )
    assert sources["second"].policy == ("specific", frozenset({1}))


@pytest.mark.parametrize(
    "text, needle",
    [
        ("model_config_list { config { name: 'x' } }", "a base_path"),
        ("not a config", "as TensorFlow Serving's model config"),
        (
            "model_config_list { config { name: 'x' base_path: '/a' } "
            "config { name: 'x' base_path: '/b' } }",
            "twice",
        ),
    ],
)
def test_a_config_file_that_cannot_serve_names_the_flag(tmp_path, text, needle):
    pytest.importorskip("tensorflow_serving")
    path = tmp_path / "models.config"
    path.write_text(text)
    with pytest.raises(ValueError, match="--model-config-file") as err:
        versions.read_model_config(str(path))
    assert needle in str(err.value)


def test_the_config_file_adds_and_removes_models_and_labels_name_versions(
    tmp_path,
):
    pytest.importorskip("tensorflow_serving")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        version(tmp_path / name, 1, f"{name}1")
        version(tmp_path / name, 2, f"{name}2")
    path = tmp_path / "models.config"
    path.write_text(CONFIG.format(first=tmp_path / "a", second=tmp_path / "b"))

    def read():
        return versions.read_model_config(str(path))

    models = registry.Registry()
    watcher = versions.Watcher(
        models, read(), stand_in_load, lambda line: None, config=(read, 1)
    )
    watcher.settle_s = 0
    watcher.start()
    assert models.find("first", label="canary").text == "a2"
    assert models.find("first", label="stable").text == "a1"
    assert models.find("second").text == "b1"
    with pytest.raises(registry.NotServed, match="no version label 'beta'"):
        models.find("first", label="beta")
    path.write_text(
        CONFIG.format(first=tmp_path / "a", second=tmp_path / "b")
        .replace('"second"', '"third"')
        .replace("versions: 1", "versions: 2")
    )
    asyncio.run(watcher.reread_config())
    assert models.find("third").text == "b2"
    with pytest.raises(registry.NotServed, match="Unknown model 'second'"):
        models.find("second")
    path.write_text("broken {")  # an unreadable file changes nothing
    asyncio.run(watcher.reread_config())
    assert models.find("third").text == "b2"


def test_the_status_shows_a_failed_version_as_tensorflow_serving_does():
    from keras_attn_cli.serving import tf_serving_api as api

    answer = api.status([1], {2: "bad file"})["model_version_status"]
    assert [(s["version"], s["state"]) for s in answer] == [
        ("2", "END"),
        ("1", "AVAILABLE"),
    ]
    assert answer[0]["status"] == {
        "error_code": "UNKNOWN",
        "error_message": "bad file",
    }


def test_a_failed_round_is_one_line_and_the_watching_goes_on(tmp_path, caplog):
    """A round that raised ended the watcher's task without a word, and
    the disk went unwatched; it is one ERROR line, then the next round."""
    version(tmp_path, 1, "one")
    watcher, models, _ = watcher_of(tmp_path, poll_s=0.01)
    watcher.start()
    rounds = []

    async def poll():
        rounds.append(1)
        if len(rounds) == 1:
            raise OSError("the disk went away")

    watcher.poll = poll

    async def watch():
        task = asyncio.create_task(watcher.run())
        while len(rounds) < 3:
            await asyncio.sleep(0.01)
        task.cancel()

    with caplog.at_level(logging.ERROR):
        asyncio.run(asyncio.wait_for(watch(), 10))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "the disk went away" in lines[0]
    assert models.find("m").text == "one"
