"""Round trip against a real Label Studio (slow): our tasks imported into a project with LABEL_CONFIG, annotations
posted by three annotators, the JSON export read back by `read_export` and scored, every count checked against what
was posted.

Label Studio runs from its own venv (its pins clash with ours), built by `make labelstudio` (a step of `make test`)
from `requirements-labelstudio.lock` once per content of that lock, outside the clone (`services.labelstudio_venv`:
every clone and run of this machine shares it), so the suite itself needs no network. Under CI=true a venv that
cannot be built fails the test.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pytest

from flows import services
from tasks.core.errors import UserError
from tasks.validation import agreement as ag
from tasks.validation import labelstudio as ls
from tests.validation.test_labelstudio import selected, write_pngs

pytestmark = pytest.mark.slow
ANNOTATORS = ("ann1", "ann2", "ann3")
STARTUP_S = 240


@pytest.fixture(scope="session")
def labelstudio_bin() -> Path:
    """`label-studio` from the venv `make labelstudio` builds (`services.labelstudio_venv`), built now when it has
    not been."""
    try:
        return services.labelstudio_venv()
    except UserError as err:
        if os.environ.get("CI") == "true":
            pytest.fail(str(err))
        pytest.skip(str(err))


@pytest.fixture
def labelstudio(labelstudio_bin, tmp_path) -> Iterator[httpx.Client]:
    """A Label Studio server on a free port with its data in tmp_path, as a client authenticated by the admin's
    legacy API token; stopped (its whole process group) however the test ends."""
    port, token = services.free_port(), secrets.token_hex(20)
    env = {**os.environ, "LABEL_STUDIO_BASE_DATA_DIR": str(tmp_path / "ls-data"), "SENTRY_DSN": "",
           "FRONTEND_SENTRY_DSN": "", "COLLECT_ANALYTICS": "false",  # offline: no telemetry
           **{f"XDG_{kind}_HOME": str(tmp_path / kind.lower()) for kind in ("CONFIG", "DATA", "CACHE")}}
    log = tmp_path / "labelstudio.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [labelstudio_bin, "start", "--no-browser", "--internal-host", "127.0.0.1", "--port", str(port),
             "--username", "admin@example.org", "--password", secrets.token_hex(8), "--user-token", token,
             "--enable-legacy-api-token"],  # since 1.20 a new organization takes only JWT tokens unless told
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Token {token}"},
                          timeout=60) as client:
            wait_until_up(client, server, log)
            yield client
    finally:
        stop(server)


def stop(server: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL after 30 s."""
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, None)):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return
        try:
            server.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_until_up(client: httpx.Client, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"label-studio exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if client.get("/api/current-user/whoami").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    pytest.fail(f"label-studio not up in {STARTUP_S} s:\n{log.read_text()[-3000:]}")


def ok(response: httpx.Response) -> dict | list:
    assert response.is_success, f"{response.request.method} {response.request.url}: {response.status_code} " \
                                f"{response.text[:500]}"
    return response.json()


def create_annotators(client: httpx.Client) -> dict[str, int]:
    """Annotator name -> Label Studio user id (users created through the API, in the admin's organization)."""
    return {name: ok(client.post("/api/users/", json={"username": name, "email": f"{name}@example.org",
                                                       "first_name": name}))["id"] for name in ANNOTATORS}


def plan(tasks: list[dict]) -> list[tuple[dict, str, str]]:
    """(task data, annotator, choice) to post: every assignee of every task but the last three (left unannotated),
    choosing own for pairs 00000-00003 (validated), else cycling through other/both/neither (never validated)."""
    posts = []
    for n, task in enumerate(tasks[:-3]):
        data = task["data"]
        for k, annotator in enumerate(data["annotators"].split(",")):
            choice = "own" if data["caption_id"] < "00004" else ("other", "both", "neither")[(n + k) % 3]
            posts.append((data, annotator, choice))
    return posts


def label(data: dict, choice: str) -> str:
    """The Label Studio choice an annotator clicks to say `choice` about the task's image."""
    other = {"A": "B", "B": "A"}[data["own"]]
    return {"own": f"caption {data['own']}", "other": f"caption {other}"}.get(choice, choice)


def annotate(client: httpx.Client, task_id: int, user_id: int, labels: list[str], cancelled: bool = False) -> None:
    result = [{"from_name": ls.CHOICES_NAME, "to_name": "image", "type": "choices", "value": {"choices": labels}}]
    ok(client.post(f"/api/tasks/{task_id}/annotations/",
                   json={"result": result if labels else [], "completed_by": user_id, "was_cancelled": cancelled}))


def test_round_trip_through_label_studio(labelstudio, tmp_path):
    started = time.monotonic()
    frame = selected(12)
    write_pngs(frame, tmp_path)
    tasks = ls.build_tasks(frame, tmp_path, annotators=ANNOTATORS, seed=0, overlap_share=0.3)
    n_overlap = sum("," in t["data"]["annotators"] for t in tasks[:-3])
    assert n_overlap >= 2  # the seed puts some annotated images in the overlap set

    users = create_annotators(labelstudio)
    project = ok(labelstudio.post("/api/projects/", json={"title": "cfgen", "label_config": ls.LABEL_CONFIG}))
    imported = ok(labelstudio.post(f"/api/projects/{project['id']}/import", content=ls.tasks_json(tasks),
                                   headers={"Content-Type": "application/json"}))
    assert imported["task_count"] == len(tasks)
    listed = ok(labelstudio.get("/api/tasks/", params={"project": project["id"], "page_size": 1000}))["tasks"]
    task_ids = {(t["data"]["caption_id"], t["data"]["side"]): t["id"] for t in listed}

    posts = plan(tasks)
    for data, annotator, choice in posts:
        annotate(labelstudio, task_ids[data["caption_id"], data["side"]], users[annotator], [label(data, choice)])
    annotate(labelstudio, task_ids["00000", "o"], users["ann1"], [], cancelled=True)  # a skip: no rating

    export = tmp_path / "export.json"
    export.write_bytes(labelstudio.get(f"/api/projects/{project['id']}/export",
                                       params={"exportType": "JSON", "download_all_tasks": "true"}).raise_for_status()
                       .content)
    exported = json.loads(export.read_bytes())
    assert (len(exported), sum(not t["annotations"] for t in exported)) == (len(tasks), 3)
    ratings = ls.read_export(export)
    names = {str(uid): name for name, uid in users.items()}
    assert ratings["annotations"].to_list() == [1] * ratings.height  # one annotation per annotator and image
    assert sorted(ratings.drop("annotations").with_columns(pl.col("annotator").replace_strict(names)).rows()) == sorted(
        (data["caption_id"], data["side"], annotator, choice) for data, annotator, choice in posts)

    images, labels = ls.image_keys(frame), ag.image_labels(ratings)
    assert ag.coverage(ratings, images) == {"images": 24, "rated": 21, "share": 21 / 24}
    table = ag.table1(labels).filter(pl.col("images") == "all")
    assert (table["count"].sum(), table.filter(pl.col("label") == "correct")["count"].item()) == (21, 8)
    assert ag.validated(labels) == ["00000", "00001", "00002", "00003"]
    overlap = ag.overlap_counts(ratings)
    assert overlap.height == n_overlap
    print(f"label-studio round trip ({len(tasks)} tasks, {len(posts)} annotations): "
          f"{time.monotonic() - started:.1f} s; kappa {ag.overlap_kappa(ratings)}")


def test_the_venv_is_built_once_per_content_of_its_lock_and_a_failed_build_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    lock = tmp_path / "empty.lock"
    lock.write_text("# nothing pinned\n")
    built = services.labelstudio_venv(lock)
    complete = built.parents[1] / "complete"
    stamp = complete.stat().st_mtime_ns
    assert built.parents[3] == tmp_path / "cache" / "cfgen"
    assert services.labelstudio_venv(lock) == built and complete.stat().st_mtime_ns == stamp  # not rebuilt
    broken = tmp_path / "broken.lock"
    broken.write_text("not a requirement ===\n")
    with pytest.raises(UserError) as refused:
        services.labelstudio_venv(broken)
    assert "broken.lock" in str(refused.value) and "\n" not in str(refused.value)
    assert [p.name for p in (tmp_path / "cache/cfgen/labelstudio").glob("*/complete")] == ["complete"]  # the first
