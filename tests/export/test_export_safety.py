"""Export never loses a user's files: destinations, atomicity, vocabularies.

Every case here lost data or wrote half an export on the 0.1 exporter.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import keras_attn_runtime as litert_runtime
from keras_attn import export
from keras_attn.export import destination, saved_model


@pytest.fixture(scope="module")
def model():
    from tests.tiny_models import build_text_model

    return build_text_model(encoder="attention")


def tree(folder):
    """`{relative path: bytes}` of every file under `folder`."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = f.read()
    return out


@pytest.mark.slow
def test_saved_model_refuses_a_folder_of_user_files(model, tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not an earlier SavedModel"):
        export.export_saved_model(model, str(user))
    assert tree(user) == {"notes.txt": b"keep me"}
    export.export_saved_model(model, str(user), overwrite=True)
    assert (user / "saved_model.pb").is_file()


@pytest.mark.slow
def test_an_earlier_artifact_of_the_same_kind_is_replaced(model, tmp_path):
    sm, lite = tmp_path / "sm", tmp_path / "m.tflite"
    export.export_text_model(model, saved_model=str(sm), tflite=str(lite))
    export.export_text_model(model, saved_model=str(sm), tflite=str(lite))
    assert export.is_saved_model_dir(sm) and export.is_tflite_file(lite)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tflite", "sm"]


def test_never_the_working_directory_or_its_ancestors(
    model, tmp_path, monkeypatch
):
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.csv").write_text("1,2")
    monkeypatch.chdir(work)
    for dest in (".", str(work), str(tmp_path), "/"):
        with pytest.raises(ValueError, match="Refusing to replace"):
            export.export_saved_model(model, dest, overwrite=True)
    assert tree(work) == {"data.csv": b"1,2"}


def test_never_the_input_model_or_its_folder(model, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    source = folder / "model.keras"
    model.save(str(source))
    before = tree(folder)
    for kind, dest in (
        ("saved_model", folder),
        ("tflite", source),
        ("saved_model", tmp_path),
    ):
        with pytest.raises(ValueError, match="Refusing to replace"):
            export.export_text_model(
                model,
                **{kind: str(dest)},
                overwrite=True,
                protect=[str(source)],
            )
    assert tree(folder) == before


def test_kinds_are_never_swapped(model, tmp_path):
    folder = tmp_path / "a_folder"
    folder.mkdir()
    (folder / "vocabulary.txt").write_text("x")
    text_file = tmp_path / "report.txt"
    text_file.write_text("mine")
    with pytest.raises(ValueError, match="is a folder, not an earlier"):
        export.export_text_tflite(model, str(folder))
    with pytest.raises(ValueError, match="is a file, not an earlier"):
        export.export_saved_model(model, str(text_file))
    with pytest.raises(ValueError, match="is a file, not an earlier LiteRT"):
        export.export_text_tflite(model, str(text_file))
    assert (folder / "vocabulary.txt").read_text() == "x"
    assert text_file.read_text() == "mine"


def test_combined_export_is_validated_before_anything_is_written(
    model, tmp_path
):
    with pytest.raises(ValueError, match="calibration"):
        export.export_text_model(
            model,
            saved_model=str(tmp_path / "sm"),
            tflite=str(tmp_path / "m.tflite"),
            quantize="int8",
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_combined_export_is_all_or_nothing(model, tmp_path, monkeypatch):
    """The second move fails: the first is undone, the earlier artifacts
    are back, no temporary folder is left."""
    sm, lite = tmp_path / "sm", tmp_path / "m.tflite"
    export.export_text_model(model, saved_model=str(sm), tflite=str(lite))
    before = tree(tmp_path)
    calls = []
    swap = destination._Stage.swap

    def failing_swap(stage):
        calls.append(stage.target)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        swap(stage)

    monkeypatch.setattr(destination._Stage, "swap", failing_swap)
    with pytest.raises(OSError, match="No space left"):
        export.export_text_model(model, saved_model=str(sm), tflite=str(lite))
    assert tree(tmp_path) == before


def test_a_failing_write_leaves_nothing(model, tmp_path, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(saved_model, "write_saved_model", full_disk)
    with pytest.raises(OSError):
        export.export_saved_model(model, str(tmp_path / "sm"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_two_models_in_one_folder_keep_their_own_vocabulary(model, tmp_path):
    from tests.tiny_models import TEXTS, build_text_model

    other = build_text_model(encoder="rnn")
    vec, _ = export.split_text_model(other)
    vec.adapt(np.array(TEXTS[30:] + ["zebra quantum"] * 5, dtype=object))
    a, b = str(tmp_path / "a.tflite"), str(tmp_path / "b.tflite")
    export.export_text_tflite(model, a)
    export.export_text_tflite(other, b)
    assert sorted(os.listdir(tmp_path)) == ["a.tflite", "b.tflite"]
    texts = TEXTS[:8]
    for path, keras_model in ((a, model), (b, other)):
        got = litert_runtime.LiteRTClassifier(path).predict(texts)
        want = keras_model.predict(np.array(texts, dtype=object), verbose=0)
        np.testing.assert_allclose(
            got["probability"], want["probability"], atol=1e-4
        )


def test_a_different_vocabulary_file_is_not_overwritten(model, tmp_path):
    vec, _ = export.split_text_model(model)
    path = tmp_path / "vocabulary.txt"
    export.write_vocabulary(vec, str(path))
    export.write_vocabulary(vec, str(path))  # the same tokens: fine
    path.write_text("\n[UNK]\nother\n")
    with pytest.raises(ValueError, match="another vocabulary"):
        export.write_vocabulary(vec, str(path))
    assert path.read_text() == "\n[UNK]\nother\n"


def make_old(folder):
    """Date a temporary export folder's marker two stale periods back."""
    import time

    marker = os.path.join(folder, destination._MARKER)
    with open(marker) as f:
        content = json.load(f)
    content["time"] = time.time() - 2 * export.STALE_SECONDS
    with open(marker, "w") as f:
        json.dump(content, f)


def test_only_our_old_temporaries_are_removed(model, tmp_path):
    # 0.2.0 removed any `.tmp-export-<pid>-*` folder whose pid was not
    # running here: a user's own folder of that name, or another
    # container's export in progress (pids are per namespace).

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    users = tmp_path / f".tmp-export-{dead}-abc"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    running = destination.temporary_dir(str(tmp_path), target="elsewhere")
    stale = destination.temporary_dir(str(tmp_path), target="gone")
    make_old(stale)
    export.export_text_tflite(model, str(tmp_path / "m.tflite"))
    assert (users / "notes.txt").read_text() == "mine"
    assert os.path.isdir(running) and not os.path.exists(stale)


def test_an_earlier_folder_moved_aside_by_a_killed_export_comes_back(
    tmp_path,
):

    tmp = destination.temporary_dir(
        str(tmp_path), target=str(tmp_path / "served")
    )
    os.makedirs(os.path.join(tmp, "old"))
    with open(os.path.join(tmp, "old", "saved_model.pb"), "wb") as f:
        f.write(b"earlier")
    make_old(tmp)
    export.clean_stale_temporaries(str(tmp_path))
    assert (tmp_path / "served" / "saved_model.pb").read_bytes() == b"earlier"
    assert not os.path.exists(tmp)


def test_a_folder_created_during_the_export_is_left_alone(model, tmp_path):
    # 0.2.0 checked the destination only at the start and deleted what
    # appeared there meanwhile.
    target = tmp_path / "served"
    real = saved_model.write_saved_model

    def slow_write(*args, **kwargs):
        real(*args, **kwargs)
        target.mkdir()
        (target / "mine.txt").write_text("keep")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(saved_model, "write_saved_model", slow_write)
        with pytest.raises(ValueError, match="changed while the export ran"):
            export.export_saved_model(model, str(target))
    assert (target / "mine.txt").read_text() == "keep"
    assert os.listdir(target) == ["mine.txt"]


@pytest.mark.slow
def test_a_file_is_replaced_by_one_rename(model, tmp_path, monkeypatch):
    # 0.2.0 moved the earlier file aside, then the new one in: a kill
    # between the two renames left no `m.tflite`.
    path = tmp_path / "m.tflite"
    export.export_text_tflite(model, str(path))
    before = path.read_bytes()
    renames = []
    real = os.replace

    def spy(src, dst):
        renames.append(dst)
        if os.path.abspath(dst) == str(path):
            assert path.read_bytes() == before  # the earlier file, intact
        return real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    export.export_text_tflite(model, str(path))
    assert renames.count(str(path)) == 1 and len(renames) == 1
    assert export.is_tflite_file(str(path))


def test_an_unwritable_destination_fails_before_any_work(
    model, tmp_path, monkeypatch
):
    """Root ignores permission bits, so the check is made to see a
    read-only folder; the export must stop before converting anything."""
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    converted = []
    monkeypatch.setattr(
        export, "convert_tflite", lambda *a, **k: converted.append(1)
    )
    with pytest.raises(ValueError, match="permission denied"):
        export.export_text_tflite(model, str(tmp_path / "m.tflite"))
    assert converted == [] and list(tmp_path.iterdir()) == []


def test_scratch_of_a_killed_export_goes_at_the_next_one(tmp_path):
    """An export killed with SIGKILL left `keras-attn-scratch-<pid>-<hex>`
    for an hour at least; the next export removes it at once when its
    process is gone, and leaves a live process's scratch alone."""
    import signal

    prefix = "keras-attn-scratch-"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from keras_attn.export import destination\n"
            f"print(destination.temporary_dir({str(tmp_path)!r}, "
            f"prefix={prefix!r}), flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    killed = child.stdout.readline().strip()
    child.send_signal(signal.SIGKILL)
    child.wait()
    live = destination.temporary_dir(str(tmp_path), prefix=prefix)
    assert os.path.isdir(killed) is False  # the new one cleaned it
    assert os.path.isdir(live)
    destination.clean_stale_temporaries(str(tmp_path), prefix)
    assert os.path.isdir(live)  # this process is alive
