"""The bad inputs of a new user's probe, through the real `cfgen`: each is one `error:` line and exit code 2 (or a
clean exit), and nothing a run wrote before is lost or changed."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import polars as pl
import pytest

from tests.conftest import ROOT
from tests.flows import test_dag_dask
from tests.flows.test_cli import assert_one_error, cfgen, one_row_parquet
from tests.flows.test_dag_dask import ENGINE, LOCAL, assert_ran_on_workers, dask_cluster, finish, recording
from tests.flows.test_dag_dask import cfgen as cfgen_process
from tests.flows.test_faults import tree

local = test_dag_dask.local  # its fixture: the whole DAG on 8 demo captions, in-process
from tests.flows.test_deployment import wait_for_deployment


def test_a_judge_model_folder_without_its_processor_config_is_one_line_naming_it(tmp_path):
    from tasks.core.schemas import SELECTED
    from tasks.demo.tiny_vlm import build_tiny_vlm

    vlm = build_tiny_vlm(tmp_path / "vlm", ["a dog on a couch"], seed=0).id
    (tmp_path / "vlm" / "processor_config.json").unlink()  # the tokenizer, its config and the weights stay
    (tmp_path / "data/processed").mkdir(parents=True)
    one_row_parquet(tmp_path / "data/processed/selected.parquet", SELECTED)
    result = cfgen(tmp_path, "judge", "-p", "judge.enabled=true", "-p", f"judge.model.id={vlm}")
    assert_one_error(result, f"model folder {vlm} has no processor config", "processor_config.json")


BROKEN = {  # what a model folder can lack or hold wrong: (break it, caught before any work or by the loader)
    "corrupt config": (lambda folder: (folder / "config.json").write_text("{not json"), "its config.json is no JSON"),
    "no tokenizer": (lambda folder: [p.unlink() for p in folder.glob("tokenizer*")], "has no tokenizer"),
    "no weights": (lambda folder: next(folder.glob("*.safetensors")).unlink(), "cannot be loaded"),
    "corrupt weights": (lambda folder: next(folder.glob("*.safetensors")).write_bytes(b"\x00" * 64),
                        "cannot be loaded"),
    "foreign config": (lambda folder: (folder / "config.json").write_text('{"model_type": "no-such-model"}'),
                       "cannot be loaded"),
    "config without a type": (lambda folder: (folder / "config.json").write_text("{}"), "cannot be loaded"),
    "nothing in it": (lambda folder: [p.unlink() for p in folder.iterdir()], "has no config.json (nor unet/)"),
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_a_broken_model_folder_is_one_error_line_naming_it(tmp_path, broken):
    """The masked LM of candidates broken one way each (issue 44): what the pre-flight can see is its one line before
    any work; what only loading shows (weights, a foreign config) is the loader wrapper's one line
    (`loading.load_once`, which every model load goes through), after the server's log: no traceback either way."""
    from tasks.core.schemas import SITES
    from tasks.demo.params import TinyModelsParams
    from tasks.tiny.text import build

    mlm = build(["a dog on a mat", "a cat on a couch"], tmp_path / "models", TinyModelsParams())["mlm"]
    breaks, says = BROKEN[broken]
    breaks(mlm)
    one_row_parquet(tmp_path / "sites.parquet", SITES, caption="a dog on a mat", edit_type="noun", original_word="dog",
                    start=2, end=5, position=1, tag="NN", n_tokens=5)
    result = cfgen(tmp_path, "candidates", "sites.parquet", "out.parquet", "-p", f"candidates.model.id={mlm}")
    if says != "cannot be loaded":
        assert_one_error(result, f"model folder {mlm}", says)
        return
    code, out, err, _ = result
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    ours = re.findall(r'File "[^"]*/(?:tasks|flows|transformers|safetensors)/', out + err)  # the temporary Prefect
    assert code == 2 and not ours and len(errors) == 1, err[-3000:]  # server may log its own (a busy SQLite)
    assert errors[0].startswith(f"error: model {mlm} cannot be loaded (load_pretrained): ")
    assert not (tmp_path / "out.parquet").exists()


IMAGE_BROKEN = {  # an image model broken: (break it under the models folder, what the one line says)
    "no tokenizer": (lambda models: shutil.rmtree(models / "sd/tokenizer"), "has no tokenizer/"),
    "corrupt unet config": (lambda models: (models / "sd/unet/config.json").write_text("{not json"),
                            "cannot be loaded (load_diffusion)"),
    "no unet weights": (lambda models: next((models / "sd/unet").glob("*.safetensors")).unlink(),
                        "cannot be loaded (load_diffusion)"),
    "corrupt CLIP weights": (lambda models: next((models / "clip").glob("*.safetensors")).write_bytes(b"\0" * 64),
                             "cannot be loaded (load_clip)"),
}


@pytest.mark.parametrize("broken", list(IMAGE_BROKEN))
def test_a_broken_image_model_is_one_error_line_in_generate(tmp_path, broken):
    """The diffusion or CLIP folder of generate broken one way each: the pre-flight's line (a component missing) or
    the loader wrapper's, exit 2, no traceback, no output (`cfgen plan` goes through the same two)."""
    from tasks.core.schemas import PAIR
    from tasks.tiny.images import build_tiny_clip, build_tiny_diffusion

    diffusion, clip = build_tiny_diffusion(tmp_path / "models/sd", seed=0), build_tiny_clip(tmp_path / "models/clip",
                                                                                            seed=0)
    breaks, says = IMAGE_BROKEN[broken]
    breaks(tmp_path / "models")
    one_row_parquet(tmp_path / "pairs.parquet", PAIR, caption="a dog on a mat", counterfactual="a cat on a mat",
                    edit_type="noun", original_word="dog", substitute="cat")
    result = cfgen(tmp_path, "generate", "pairs.parquet", "out.parquet", "-p", f"generate.diffusion.id={diffusion.id}",
                   "-p", f"generate.clip.pretrained={clip.pretrained}", "-p", f"generate.clip.config={clip.config}")
    code, out, err, _ = result
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    ours = re.findall(r'File "[^"]*/(?:tasks|flows|diffusers|transformers|open_clip|safetensors)/', out + err)
    assert code == 2 and not ours and len(errors) == 1 and says in errors[0], err[-3000:]  # the temporary Prefect
    assert not (tmp_path / "out.parquet").exists()  # server may log its own traceback (a busy SQLite)


def test_a_dask_address_without_a_scheduler_is_one_line_naming_it_within_seconds(tmp_path):
    from tasks.text.ingest import SCHEMA

    one_row_parquet(tmp_path / "captions.parquet", SCHEMA, caption="a dog on a mat")
    result = cfgen(tmp_path, "sites", "captions.parquet", "out.parquet", "-p", "engine.dask_address=tcp://127.0.0.1:9")
    assert_one_error(result, "no Dask scheduler answers at engine.dask_address tcp://127.0.0.1:9", "dask scheduler")
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize(("store", "says"), [("params.yaml", "params.yaml is not a directory"),
                                             ("/proc/cfgen-store", "/proc is not writable")])
def test_a_result_store_no_file_can_be_made_in_is_one_line_before_any_work(tmp_path, store, says):
    """`engine.result_storage` is checked before the first flow: a run that persisted nothing would, after a kill,
    compute everything again."""
    from tasks.text.ingest import SCHEMA

    one_row_parquet(tmp_path / "captions.parquet", SCHEMA, caption="a dog on a mat")
    result = cfgen(tmp_path, "sites", "captions.parquet", "out.parquet", "-p", f"engine.result_storage={store}")
    assert_one_error(result, "cannot write", says)
    assert not (tmp_path / "out.parquet").exists()


def test_a_dask_address_that_accepts_and_never_answers_is_one_line_within_seconds(tmp_path):
    """A listener that completes TCP's handshake and then says nothing (a firewall's tarpit, another service)."""
    import socket
    import threading

    from tasks.text.ingest import SCHEMA

    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True).start()
    address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    one_row_parquet(tmp_path / "captions.parquet", SCHEMA, caption="a dog on a mat")
    try:
        result = cfgen(tmp_path, "sites", "captions.parquet", "out.parquet", "-p", f"engine.dask_address={address}")
    finally:
        listener.close()
    assert_one_error(result, f"no Dask scheduler answers at engine.dask_address {address} (TimeoutError)")
    assert accepted and not (tmp_path / "out.parquet").exists()


def test_sigterm_stops_serve_cleanly(tmp_path, prefect_server):
    """A registered, serving deployment: SIGTERM ends `cfgen serve` with exit 0 and no un-awaited shutdown."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    (tmp_path / "captions.tsv").write_text("a_0\tA dog on a couch.\n")
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PYTHONPATH": str(ROOT)}
    log = tmp_path / "serve.log"
    serving = subprocess.Popen([sys.executable, "-m", "flows.cli", "serve", "--name", "sigterm", "--source",
                                "captions.tsv"], cwd=tmp_path, env=env, stdout=log.open("w"),
                               stderr=subprocess.STDOUT)
    try:
        with get_client(sync_client=True) as client:
            assert not wait_for_deployment(client, "cfgen-dataset/sigterm", serving).paused
            time.sleep(2)  # past registration: the runner is polling
            serving.send_signal(signal.SIGTERM)
            code = serving.wait(timeout=30)
            assert client.read_deployment_by_name("cfgen-dataset/sigterm").paused  # its schedule stopped with it
    finally:
        serving.kill()
    output = log.read_text()
    print(output)
    assert "never awaited" not in output and "Traceback" not in output, output[-3000:]
    assert code == 0, output[-3000:]


def test_a_dask_worker_started_without_nltk_data_is_given_the_folder_this_process_found_it_in(tmp_path,
                                                                                                prefect_server):
    """The worker's NLTK_DATA names an empty folder (as on a host where nobody set it): `cfgen sites` on it still
    tags every caption, on the worker."""
    from tasks.text.ingest import SCHEMA

    workers = {"worker-without-nltk": {"NLTK_DATA": str(tmp_path / "nothing-here")}}
    with contextlib.contextmanager(dask_cluster)(tmp_path, workers) as cluster:
        folder = cluster.folder
        shutil.copy(ROOT / "params.yaml", folder / "params.yaml")
        one_row_parquet(folder / "captions.parquet", SCHEMA, caption="a dog on a mat")
        with recording(cluster) as recorded:
            step = cfgen_process(folder, "sites", "captions.parquet", "sites.parquet", "-p",
                                 f"engine.dask_address={cluster.address}", log="sites.log")
            finish(step, folder / "sites.log", timeout=300)
        assert assert_ran_on_workers(cluster, recorded, step.pid) == {"sites": 1}
    assert pl.read_parquet(folder / "sites.parquet").height > 0


def test_a_worker_that_cannot_see_the_nltk_folder_is_told_what_to_set():
    from tasks.core.environment import find_nltk_data

    line = find_nltk_data({"corpora/no_such_corpus": "/no/such/nltk_data"})
    assert line == ("finds no NLTK data corpora/no_such_corpus (NLTK_DATA=" + os.environ.get("NLTK_DATA", "unset")
                    + " there, and /no/such/nltk_data is not on its host): restart it with NLTK_DATA set to a folder "
                    "that holds them")


def test_a_stage_metrics_file_holds_facts_and_its_run_log_the_counters(tmp_path):
    """DVC tracks facts only, so a run that computed less (a cache) rewrites the same bytes; the run's counters go
    to the run log beside it, which neither DVC nor git tracks."""
    from flows.engine.counters import run_log, write_metrics

    first = {"stage": "sites", "rows_in": 4, "rows_out": 9, "shards": 2, "shards_computed": 2}
    path = tmp_path / "reports/metrics/sites.json"
    write_metrics(first, path)
    tracked = path.read_bytes()
    assert json.loads(tracked) == {"stage": "sites", "rows_in": 4, "rows_out": 9}  # shards: engine.shard_size's
    write_metrics({**first, "shards_computed": 0}, path)  # all cached
    assert path.read_bytes() == tracked and json.loads(run_log(path).read_text())["shards_computed"] == 0
    several = {"sites": first, "candidates": {**first, "stage": "candidates"}}
    write_metrics(several, path)
    assert "shards_computed" not in path.read_text() and json.loads(run_log(path).read_text()) == several
    ignored = subprocess.run(["git", "check-ignore", "-q", "reports/metrics/generate.run.json"], cwd=ROOT)
    assert ignored.returncode == 0, "run logs must stay out of git"


PER_PAIR = {"pairs_generated", "samples_rendered", "renders", "edits_filled", "pairs_asked", "pairs_checked"}


@pytest.mark.slow
def test_cfgen_run_of_an_up_to_date_folder_leaves_every_report_as_it_was(tmp_path, local):
    """The whole DAG again under other engine and batch settings, every unit cached: no metrics file (or any other
    report) changes but the datasheet's lines of the params set differently (it lists every param as the run that
    wrote it had them); only the run logs (`*.run.json`: counters, untracked) say that no pair, sample, render, fill,
    VLM question or truth check was computed."""
    folder = shutil.copytree(local[0], tmp_path / "again")
    set_differently = {option.split("=")[0] for option in (*LOCAL, *ENGINE)}

    def reports() -> dict[str, bytes]:
        return {name: b"\n".join(line for line in data.split(b"\n") if name != "datasheet.md"
                                 or line.split(b" = ")[0].decode() not in set_differently)
                for name, data in tree(folder / "reports").items() if not name.endswith(".run.json")}
    before = reports()
    run = cfgen_process(folder, "run", *(arg for option in ENGINE for arg in ("-p", option)), log="run.log")
    finish(run, folder / "run.log")
    assert reports() == before
    listed = (folder / "reports/datasheet.md").read_text().splitlines()
    assert {"engine.shard_size = 4", "engine.torch_threads = 1"} <= set(listed)
    # every per-pair unit from the store (the shards are others: content-defined at another shard size)
    computed = {path.name: {name: count for name, count in json.loads(path.read_text()).items() if name in PER_PAIR}
                for path in (folder / "reports/metrics").glob("*.run.json")}
    assert {name for counts in computed.values() for name in counts} == PER_PAIR
    assert all(count == 0 for counts in computed.values() for count in counts.values()), computed


def _captions_tsv(tmp_path) -> str:
    (tmp_path / "captions.tsv").write_text("a_0\tA dog on a couch.\n")
    return "captions.tsv"


FOLDER_COMMANDS = {  # a command that writes a folder: its arguments before that folder, and after it
    "tiny-models": (["tiny-models", "captions.tsv"], []),
    "synthetic-coco": (["synthetic-coco"], []),
    "toy-world train": (["toy-world", "train"], ["--vae-steps", "1", "--diffusion-steps", "1", "--clip-steps", "1",
                                                 "--lm-steps", "1", "--batch", "2"]),
}


@pytest.mark.parametrize("where", ["a file", "under a file", "/proc"])
@pytest.mark.parametrize("command", list(FOLDER_COMMANDS))
def test_a_folder_a_command_cannot_write_is_one_line_before_any_work(tmp_path, command, where):
    """Every folder a command builds is checked first (`io.check_folder`): a file in its place, a file on its way, a
    folder no file can be made in; the file is left as it was."""
    _captions_tsv(tmp_path)
    (tmp_path / "taken").write_text("kept")
    folder, blocker = {"a file": ("taken", "taken"), "under a file": ("taken/models", "taken"),
                       "/proc": ("/proc/cfgen-models", "/proc")}[where]
    head, tail = FOLDER_COMMANDS[command]
    assert_one_error(cfgen(tmp_path, *head, folder, *tail), f"cannot write {folder}: {blocker} is not")
    assert (tmp_path / "taken").read_text() == "kept" and not os.path.exists("/proc/cfgen-models")


@pytest.mark.parametrize("args, option", [
    (["toy-world", "train", "out", "--batch", "0"], "--batch"),
    (["toy-world", "train", "out", "--vae-steps", "-5"], "--vae-steps"),
    (["toy-world", "train", "out", "--seed", "-1"], "--seed"),
    (["toy-world", "train", "out", "--seed", str(2**32)], "--seed"),
    (["toy-world", "train", "out", "--lr", "nan"], "--lr"),
    (["toy-world", "captions", "out", "--seed", "-1"], "--seed"),
    (["toy-world", "captions", "out", "--count", "0"], "--count"),
    (["plan", "captions.tsv", "--workers", "0", "--output", "out"], "--workers"),
])
def test_a_number_outside_its_option_range_is_one_line(tmp_path, args, option):
    """Every numeric option of the tools' commands declares its range (seeds 0 to 2**32-1): typer refuses a value
    outside it as one line (`console.OneLineUsage`) before any work."""
    _captions_tsv(tmp_path)
    assert_one_error(cfgen(tmp_path, *args), f"Invalid value for '{option}'")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option, value, says", [
    ("--cron", "bad cron", "--cron 'bad cron' is no cron schedule"),
    ("--cron", "99 99 * * *", "--cron '99 99 * * *' is no cron schedule"),
    ("--cron", "", "--cron '' is no cron schedule"),
    ("--name", "", "--name '' is no deployment name"),
    ("--name", "a/b", "--name 'a/b' is no deployment name"),
])
def test_serve_with_a_bad_schedule_or_name_is_one_line_and_registers_nothing(tmp_path, prefect_server, option,
                                                                              value, says):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.sorting import DeploymentSort
    from prefect.settings import PREFECT_API_URL

    _captions_tsv(tmp_path)
    args = {"--name": "bad-input", "--cron": "0 3 * * *", option: value}
    result = cfgen(tmp_path, "serve", *[x for item in args.items() for x in item], "--source", "captions.tsv",
                   env_extra={"PREFECT_API_URL": PREFECT_API_URL.value()})
    assert_one_error(result, says)
    with get_client(sync_client=True) as client:
        names = {d.name for d in client.read_deployments(limit=200, sort=DeploymentSort.NAME_ASC)}
    assert not names & {"bad-input", value}


@pytest.mark.parametrize("command", ["no-such-cfgen-command", "/nonexistent/cmd", "not-executable", ""])
def test_with_server_of_a_command_that_is_no_executable_is_one_line_before_the_server(tmp_path, command):
    (tmp_path / "not-executable").write_text("echo hi\n")
    path = str(tmp_path / command) if command == "not-executable" else command
    assert_one_error(cfgen(tmp_path, "with-server", "--", path, "repro"),
                     f"with-server: {shlex.quote(path)} is no executable")


@pytest.mark.parametrize("health", [None, "<html>a web page</html>"])
def test_a_prefect_api_url_that_answers_as_another_service_is_one_line(tmp_path, health):
    """A plain web server at PREFECT_API_URL: a 404, or a page that is no JSON, for `/api/health`."""
    import functools
    import http.server
    import threading

    from tasks.text.ingest import SCHEMA

    site = tmp_path / "site"
    (site / "api").mkdir(parents=True)
    if health:
        (site / "api" / "health").write_text(health)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/api"
    one_row_parquet(tmp_path / "captions.parquet", SCHEMA, caption="a dog on a mat")
    try:
        result = cfgen(tmp_path, "sites", "captions.parquet", "out.parquet", env_extra={"PREFECT_API_URL": url})
    finally:
        server.shutdown()
    assert_one_error(result, f"PREFECT_API_URL {url} does not answer as a Prefect API",
                     "404" if health is None else "200")
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("home", ["under a file", "/proc/cfgen-prefect"])
def test_a_prefect_home_that_cannot_be_made_is_one_line(tmp_path, home):
    from tasks.text.ingest import SCHEMA

    (tmp_path / "taken").write_text("kept")
    home = str(tmp_path / "taken" / "prefect") if home == "under a file" else home
    one_row_parquet(tmp_path / "captions.parquet", SCHEMA, caption="a dog on a mat")
    result = cfgen(tmp_path, "sites", "captions.parquet", "out.parquet", env_extra={"PREFECT_HOME": home})
    assert_one_error(result, f"PREFECT_HOME {home} is no folder this user can write")
    assert not (tmp_path / "out.parquet").exists() and (tmp_path / "taken").read_text() == "kept"
