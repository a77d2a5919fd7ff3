"""A process (or Dask worker) holds the models of the stage it runs, not of every stage it ran: the runner every
command builds (`flows.engine.sharding.task_runner`) releases them when the stage's flow run ends. Under the paper
profile its one-GPU-per-worker check weighs only the models that run."""

from __future__ import annotations

import os
import signal
import weakref

from flows.engine.sharding import task_runner
from tasks.core.loading import release_models
from tasks.core.specs import model_specs
from tasks.core.writing import write_frame
from tasks.text.ingest import read_captions
from tests.conftest import DEMO_CAPTIONS, project_params, requires_nltk


@requires_nltk
def test_a_stage_s_models_are_gone_once_its_flow_run_ends(tmp_path, result_store, caption_params, monkeypatch):
    """The caption steps in one process, each a flow run on the runner `cfgen run` gives them: candidates loads its
    masked LM once for all its shards and perplexity its causal LM; each model is garbage (its weakref dead) once its
    stage's flow run has ended, so when perplexity loads, the masked LM is already gone."""
    from flows.text import stage_flow
    from tasks.stages import caption_steps
    from tasks.text import candidates, perplexity

    loads: dict[str, list] = {}  # stage -> (id, weakref) of the model each call of its loader returned
    held_at_load: dict[str, set[str]] = {}  # stage -> the stages whose models were alive when it loaded

    def spy(stage, module) -> None:
        load = module.load_pretrained

        def recorded(spec, model_class):
            tokenizer, model = load(spec, model_class)
            held_at_load.setdefault(stage, set()).update(
                other for other, refs in loads.items() if other != stage and any(ref() for _, ref in refs))
            loads.setdefault(stage, []).append((id(model), weakref.ref(model)))
            return tokenizer, model

        monkeypatch.setattr(module, "load_pretrained", recorded)

    spy("candidates", candidates)
    spy("perplexity", perplexity)
    runner, source = task_runner(caption_params), tmp_path / "captions.parquet"
    write_frame(read_captions(DEMO_CAPTIONS)[0].head(24), source)
    for name in caption_steps():
        output = tmp_path / f"{name}.parquet"
        metrics = stage_flow.with_options(task_runner=runner)(name, source, output, caption_params)
        source = output
        if name in loads:
            assert metrics["shards_computed"] > 1 and len(loads[name]) == metrics["shards_computed"]
            assert len({model for model, _ in loads[name]}) == 1  # loaded once for all its shards
            assert all(ref() is None for _, ref in loads[name]), f"{name}'s model outlived its stage"
    assert set(loads) == {"candidates", "perplexity"} and held_at_load == {"candidates": set(), "perplexity": set()}

    lm = perplexity.load_models(caption_params.perplexity).model  # outside a stage: cached until released
    alive = weakref.ref(lm)
    del lm
    assert alive() is not None  # (one assert each: pytest's kept operands would hold the model)
    assert release_models() >= 1
    assert alive() is None


def test_the_gpu_pin_check_weighs_only_the_models_that_run():
    """Every model that runs pinned to a GPU: the workers may see several GPUs, though the disabled judge's VLM is
    left on `device: auto`; enabling the judge makes its VLM count."""
    paper = project_params("profile=paper")
    pins = [f"{key}.device=cuda:0" for key, _ in paper.running_models()]
    cluster = ("profile=paper", "engine.dask_address=tcp://127.0.0.1:8786", *pins)
    params = project_params(*cluster)
    assert not params.judge.enabled and dict(model_specs(params))["judge.model"].device == "auto"
    assert task_runner(params).devices_pinned is True
    judged = (*cluster, "judge.enabled=true", f"judge.model.paper.revision={'a' * 40}")
    assert task_runner(project_params(*judged)).devices_pinned is False
    assert task_runner(project_params(*judged, "judge.model.paper.device=cuda:0")).devices_pinned is True



@requires_nltk
def test_a_worker_killed_before_the_scheduler_knows_costs_neither_the_check_nor_the_release():
    """A worker SIGKILLed just before a stage's runner checks the workers and, at its end, releases their models: both
    broadcasts pass over it (no CommClosedError: a kill at any moment costs only the task in flight)."""
    from distributed import Client, LocalCluster

    from flows.engine.cluster import ClusterTaskRunner

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        pids = client.run(os.getpid)
        os.kill(pids[min(pids)], signal.SIGKILL)
        with ClusterTaskRunner(cluster.scheduler_address, {}, None) as runner:
            runner.check_workers()  # one live worker: its NLTK data found, nothing to say
            assert pids[min(pids)] not in runner.client.run(os.getpid, on_error="ignore").values()
