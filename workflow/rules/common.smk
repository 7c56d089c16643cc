# Config validation, grid expansion, the final targets, input functions and wildcard
# constraints (the rules files hold rules only). Everything here runs when the DAG is built,
# before any job. What `all` builds: the registry of paper outputs, atat.analysis.paper.

import inspect
import re
import sys
import types
from pathlib import Path

import snakemake.script as _sm_script
import yaml
from snakemake.common import overwrite_function_params
from snakemake.resources import Resource

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from atat.plan.config import (  # noqa: E402
    ConfigError,
    defense_params,
    eps_tag,
    model_runs,
    training_params,
)
from atat.plan.config import autoattack_params, inversion_params, inversion_shards  # noqa: E402
from atat.plan.config import dose_response_points, with_dose_response  # noqa: E402
from atat.plan.config import n_classes as _n_classes  # noqa: E402
from atat.plan.eps_scale import factor as epsilon_factor  # noqa: E402
from atat.analysis.claims import load_plan as load_claims_plan  # noqa: E402
from atat.plan.config_memo import validate_config_once  # noqa: E402
from atat.data.manifest import STAMP_SUFFIX  # noqa: E402
from atat.data.manifest import stamp_path as _stamp_path  # noqa: E402
from atat.data.manifest import stamp_problems as _stamp_problems  # noqa: E402
from atat.analysis.paper import (  # noqa: E402
    FIGURE2_SPEC,
    MAIN_TABLE_IDS,
    REGRESSION_TABLE_IDS,
    Plan,
    claims_inputs,
    final_targets,
    figure5_run,
    grid_runs,
    hsic_file,
    hsic_table_runs,
    inversion_attacks,
    main_architecture,
    permuted_defenses,
    plain_nodef_defenses,
    reconstruction_models,
    robustness_table_eps,
    run_attacks,
    section3_roles,
    table4_architecture,
    table_number,
    table_rules,
    unseen_pixel_runs,
)
from atat.analysis.paper import check as check_paper_outputs  # noqa: E402
from atat.analysis.summary import INVERSION_METRICS  # noqa: E402
from atat.plan.weights_table import (  # noqa: E402
    TORCHVISION_WEIGHTS,
    torchvision_weights_filename,
    torchvision_weights_url,
)


def cache_function_signatures():
    """Snakemake reads the signature of a rule's input, params, log or resource function on
    every call (inspect.signature: ~130,000 times for the paper's DAG, ~1 CPU-s of its dry run),
    and of its own Resource.evaluate once per resource and job (~37,000 times, ~0.7 CPU-s).
    Each function's signature is read once here and handed to Snakemake's own override
    (snakemake.common.overwrite_function_params): the same value, computed once. The
    Snakefile calls this after its last rule. Returns how many functions it covered."""
    evaluate = Resource.evaluate
    if not hasattr(evaluate, "_overwrite_params"):
        bound = Resource("_", 1).evaluate  # the signature Snakemake reads: of the bound method
        overwrite_function_params(evaluate, inspect.signature(bound).parameters)
    seen = 1
    for each in workflow.rules:
        items = [*each.input, *each.params, *(each.log or [])]
        items += [getattr(v, "_evaluator", None) for v in (each.resources or {}).values()]
        for item in items:
            file = getattr(item, "_file", None)
            for f in (item, getattr(item, "callable", None), getattr(file, "callable", None)):
                if isinstance(f, types.FunctionType) and not hasattr(f, "_overwrite_params"):
                    overwrite_function_params(f, inspect.signature(f).parameters)
                    seen += 1
    return seen


def cache_script_sources():
    """Before planning, Snakemake checks every job's `script:` by reading the script through
    its source cache (snakemake.script.get_source: ~4,150 reads of the same 50 files for the
    paper's DAG, ~0.6 CPU-s of its dry run). A script path without wildcards names the same
    file for every job of its rule, and Snakemake keeps the first copy it read for the whole
    run anyway (its runtime source cache), so the answer for such a path is read once here
    and reused; a path with "{...}", and every read through another source cache (a job
    running its script), still goes to Snakemake. The Snakefile calls this after its last
    rule."""
    get_source = _sm_script.get_source
    if getattr(get_source, "_atat_once", False):
        return
    answers = {}

    def get_source_once(path, sourcecache, basedir=None, wildcards=None, params=None):
        if not isinstance(path, str) or "{" in path or sourcecache is not workflow.sourcecache:
            return get_source(path, sourcecache, basedir, wildcards, params)
        key = (path, str(basedir))
        if key not in answers:
            answers[key] = get_source(path, sourcecache, basedir, wildcards, params)
        return answers[key]

    get_source_once._atat_once = True
    _sm_script.get_source = get_source_once


# The full check imports torch (defense parameters); it is skipped when this exact config
# and code passed before (marker under .snakemake/, see atat.plan.config_memo).
try:
    validate_config_once(config, ".snakemake/atat-validated-configs")
    # the dose-response sweep's generated AT-AT variants become defined defenses for every
    # rule (atat.plan.config.with_dose_response; a no-op without `dose_response`)
    config.update(with_dose_response(config))
except ConfigError as exc:
    raise WorkflowError(str(exc)) from None

REGRESSIONS_YAML = f"{workflow.basedir}/config/regressions.yaml"
with open(REGRESSIONS_YAML) as _fh:
    REGRESSIONS = yaml.safe_load(_fh) or {}
# every name an entry of the registry refers to (atat.analysis.paper.check): a typo stops here
try:
    check_paper_outputs(config, REGRESSIONS, REGRESSIONS_YAML)
except ConfigError as exc:
    raise WorkflowError(str(exc)) from None
# the pre-registered analysis plan of the claims table (atat.analysis.claims.load_plan; an input of the
# claims rule, so a change reruns it): a bad key or number stops here, before any job
CLAIMS_PLAN = f"{workflow.basedir}/config/analysis/claims.yaml"
try:
    load_claims_plan(CLAIMS_PLAN)
except ConfigError as exc:
    raise WorkflowError(str(exc)) from None

RES = config["resources_dir"]
RUNS = model_runs(config)
EPS = {eps_tag(e): float(e) for e in config["autoattack"]["epsilons"]}
# Rule autoattack's job layout (autoattack.job): one job per (model, epsilon), wildcard {eps},
# or one job per model writing every epsilon's file. The files are the same either way.
_AA_MODEL = "{dataset}/{arch}/{defense}/seed{seed}"
AUTOATTACK_PER_MODEL = config["autoattack"].get("job", "per_epsilon") == "per_model"
if AUTOATTACK_PER_MODEL:
    AUTOATTACK_OUTPUT = [f"results/robustness/{_AA_MODEL}/eps{e}.json" for e in EPS]
    AUTOATTACK_JOB_NAME = f"{_AA_MODEL}/all_eps"
else:
    AUTOATTACK_OUTPUT = f"results/robustness/{_AA_MODEL}/eps{{eps}}.json"
    AUTOATTACK_JOB_NAME = f"{_AA_MODEL}/eps{{eps}}"
INV_ATTACKS = inversion_attacks(config)
SYNTH = [n for n, d in config["datasets"].items() if d["source"] == "synthfaces"]
REAL = [n for n, d in config["datasets"].items() if d["source"] != "synthfaces"]
PLAN = Plan(config, RUNS, REGRESSIONS)


def _alt(names):
    return "|".join(sorted(names)) if names else "(?!x)x"


wildcard_constraints:
    dataset=_alt(config["datasets"]),
    arch=_alt(config["architectures"]),
    defense=_alt(config["defenses"]),
    seed=r"\d+",
    eps=_alt(re.escape(e) for e in EPS),


def autoattack_settings(wildcards):
    """Rule autoattack's settings of one model: ``autoattack`` with the model's n_examples
    (``autoattack.overrides``, atat.plan.config.autoattack_params)."""
    return autoattack_params(config, wildcards.dataset, wildcards.arch, wildcards.defense)


def autoattack_epsilons(wildcards):
    """The epsilons (floats) of one autoattack job, in the order of its output files."""
    return list(EPS.values()) if AUTOATTACK_PER_MODEL else [EPS[wildcards.eps]]


def dataset_dir(dataset):
    return f"{RES}/datasets/{dataset}"


def dataset_stamp(dataset):
    """What a job that reads ``dataset`` declares as its input: the stamp next to the folder
    (atat.data.manifest.write_stamp: the manifest's checksum), never the folder itself, whose
    mtime changes whenever anything inside it does. Scripts get the folder back with
    atat.data.manifest.dataset_folder."""
    return str(_stamp_path(dataset_dir(dataset)))


def warn_about_broken_datasets():
    """At every invocation (dry runs too): a dataset folder that no longer matches its stamp
    (emptied, deleted, edited) is named with how to restore it; nothing is rerun for it."""
    stamps = [dataset_stamp(name) for name in config["datasets"]]
    for problem in _stamp_problems(stamps, files=False):
        print(f"WARNING: {problem}", file=sys.stderr)


def check_datasets_before_jobs():
    """Before the first job starts (onstart; not in dry runs): every dataset that a job about to
    run reads, and that no job of this run rebuilds, must match its stamp, every listed image
    file present. Otherwise stop with no job started, so no output a job would replace is
    deleted by Snakemake for a job that cannot work."""
    jobs = list(workflow.dag.needrun_jobs())
    rebuilt = {str(f) for job in jobs for f in job.output}
    stamps = {str(f) for job in jobs for f in job.input if str(f).endswith(STAMP_SUFFIX)}
    problems = _stamp_problems(sorted(stamps - rebuilt), files=True)
    if problems:
        raise WorkflowError("\n".join(problems) + "\nNo job was started.")
    check_dataset_rebuilds(jobs)


def _runs_only_after_a_rerun_dependency(reason):
    """Whether a job would run only because a job it depends on runs (its outputs exist and
    nothing of its own changed)."""
    own = (
        reason.missing_output,
        reason.incomplete_output,
        reason.updated_input,
        reason.forced,
        reason.params_changed,
        reason.code_changed,
        reason.input_changed,
        reason.software_stack_changed,
    )
    return bool(reason.updated_input_run) and not any(own)


def check_dataset_rebuilds(jobs):
    """A dataset whose stamp is missing (deleted with the folder) would be rebuilt in the same
    run as the finished jobs that read it, which Snakemake then reruns whatever the rebuilt
    stamp says, deleting their outputs first. Stop and say how to rebuild it alone, after
    which only jobs whose recorded stamp checksum differs rerun. A dataset rebuilt for a reason
    of its own (changed params, forced) reruns its readers, as it should."""
    dag = workflow.dag
    needrun = set(jobs)
    for job in jobs:
        stamps = [str(f) for f in job.output if str(f).endswith(STAMP_SUFFIX)]
        reason = dag.reason(job)
        if not stamps or Path(stamps[0]).exists() or reason.forced or reason.params_changed:
            continue
        if reason.code_changed or reason.input_changed or reason.software_stack_changed:
            continue
        readers = sorted(
            str(reader)
            for reader in dag.depending[job]
            if reader in needrun and _runs_only_after_a_rerun_dependency(dag.reason(reader))
        )
        if readers:
            raise WorkflowError(
                f"{stamps[0]} is missing, so its dataset would be built again in this run "
                f"and the {len(readers)} finished job(s) that read it would rerun after it, "
                f"their outputs deleted first (e.g. {', '.join(readers[:3])}). If the "
                f"dataset is the one they were made from (its build is deterministic), build "
                f"it on its own first: `snakemake {stamps[0]}` (with your --configfile / "
                f"--profile); Snakemake then compares the new stamp's checksum with the one "
                f"each job recorded and reruns only those whose dataset differs. To rerun them "
                f"anyway, name their rules with --forcerun. No job was started."
            )


warn_about_broken_datasets()


def dataset_resolution(dataset):
    return config["datasets"][dataset]["resolution"]


def n_classes(dataset):
    return _n_classes(config, dataset)


def weights_path(wildcards):
    """Pretrained weights file of this cell, or None when training from scratch: the config's
    pretraining of the architecture at the dataset's resolution (rule pretrain_backbone), else
    torchvision's ImageNet file (rule torchvision_weights)."""
    params = training_params(config, wildcards.dataset, wildcards.arch, wildcards.defense)
    if not params["pretrained"]:
        return None
    if config.get("pretraining"):
        return pretrained_backbone_file(wildcards.arch, dataset_resolution(wildcards.dataset))
    weights = config["architectures"][wildcards.arch].get("weights", "IMAGENET1K_V1")
    return f"{RES}/weights/torchvision/{torchvision_weights_filename(wildcards.arch, weights)}"


def prior_model(wildcards):
    """Model file of the previous stage a defense builds on (Unseen-Pixels mask stages)."""
    prior = config["defenses"][wildcards.defense].get("prior")
    if not prior:
        return None
    return (
        f"results/models/{wildcards.dataset}/{wildcards.arch}/{prior}/seed{wildcards.seed}/model.pt"
    )


def stop_reference(wildcards):
    """metrics.json of the model whose val_acc an early-stopped variant stops at, when its
    training.stop_at_val_acc names a variant (paper Table 3 baseline), else None."""
    ref = training_params(config, wildcards.dataset, wildcards.arch, wildcards.defense).get(
        "stop_at_val_acc"
    )
    if not isinstance(ref, str):
        return None
    return f"results/models/{wildcards.dataset}/{wildcards.arch}/{ref}/seed{wildcards.seed}/metrics.json"


def train_inputs(wildcards):
    inputs = {"dataset": dataset_stamp(wildcards.dataset)}
    if prior_model(wildcards):
        inputs["prior_model"] = prior_model(wildcards)
    if stop_reference(wildcards):
        inputs["stop_reference"] = stop_reference(wildcards)
    weights = weights_path(wildcards)
    if weights:
        inputs["weights"] = weights
    return inputs


def train_spec(wildcards):
    """Everything that determines the model, handed to atat.training.train.TrainSpec."""
    ds = wildcards.dataset
    spec = dict(
        model_id=f"{ds}/{wildcards.arch}/{wildcards.defense}/seed{wildcards.seed}",
        dataset_root=f"{dataset_dir(ds)}/private",
        resolution=dataset_resolution(ds),
        n_classes=n_classes(ds),
        architecture=wildcards.arch,
        defense=defense_variant(wildcards),
        training=training_params(config, ds, wildcards.arch, wildcards.defense),
        augmentation=config["augmentation"],
        seed=int(wildcards.seed),
        weights_path=weights_path(wildcards),
    )
    if stop_reference(wildcards):  # only then: the params of every other model stay as they were
        spec["stop_reference_metrics"] = stop_reference(wildcards)
    return spec


def defense_variant(wildcards):
    variant = defense_params(config, wildcards.defense, (wildcards.dataset, wildcards.arch))
    if prior_model(wildcards):
        variant["prior_model"] = prior_model(wildcards)
    return variant


def model_dir(run):
    return f"results/models/{run.path}"


def summary_models(wildcards):
    """Inputs of the summary job per model: metrics and one AutoAttack file per epsilon."""
    return [
        dict(
            dataset=r.dataset,
            architecture=r.architecture,
            defense=r.defense,
            defense_type=config["defenses"][r.defense]["type"],
            seed=r.seed,
            replicate=r.replicate,
            treatment=r.treatment,
            metrics=f"{model_dir(r)}/metrics.json",
            robustness={e: f"results/robustness/{r.path}/eps{e}.json" for e in EPS},
            inversion={
                a: f"results/inversion/{r.path}/{a}/metrics.json" for a in run_attacks(config, r)
            },
        )
        for r in RUNS
    ]


def summary_inputs(wildcards):
    files = []
    for m in summary_models(wildcards):
        files.append(m["metrics"])
        files.extend(m["robustness"].values())
        files.extend(m["inversion"].values())
    return files


def all_targets():
    """The final targets of `all`: every entry of the registry of paper outputs that this
    config can build (atat.analysis.paper.REGISTRY; a table whose inputs the config lacks is not a
    target)."""
    return final_targets(PLAN)


def claims_rule_inputs(wildcards):
    """Named inputs of the claims table (atat.analysis.paper.claims_inputs): the files the plan
    builds, the claims cell's HSIC files as hsic_<defense>, the dose-response endpoints'
    per-image files as the list dose_per_image (where the plan sweeps lambda)."""
    found = claims_inputs(PLAN)
    named = {
        k: v for k, v in found.items() if k not in ("hsic", "dose_per_image") and v is not None
    }
    named.update({f"hsic_{d}": f for d, f in found["hsic"].items()})
    if found["dose_per_image"]:
        named["dose_per_image"] = found["dose_per_image"]
    return named


def claims_inversion_records(wildcards):
    """The inversion records (metrics.json) of every attacked model: the claims table compares
    the analysis plan's time with the first of theirs (atat.analysis.claims.plan_status)."""
    return [
        t
        for t in final_targets(PLAN, "inversion")
        if t.startswith("results/inversion/") and Path(t).name == "metrics.json"
    ]


def figure5_model_run():
    run = figure5_run(PLAN)
    if run is None:
        raise WorkflowError(
            f"Figure 5 needs a NoDef model of tables.table4_architecture "
            f"('{main_architecture(config)}'); the config trains none"
        )
    return run


def inversion_inputs(wildcards):
    ds = wildcards.dataset
    inputs = dict(
        model=f"results/models/{ds}/{wildcards.arch}/{wildcards.defense}/seed{wildcards.seed}/model.pt",
        dataset=dataset_stamp(ds),
        generator=generator_file(config["datasets"][ds]["generator"]),
        evaluation=f"results/evaluation/{ds}/model.pt",
    )
    face = face_network_file(ds)
    if face:
        inputs["face"] = face
    if wildcards.attack == "ppdg":
        kind = inversion_params(config, ds, wildcards.arch, wildcards.defense, "ppdg")["perceptual"]
        if kind == "vgg16_lpips":
            files = lpips_files()
            inputs["perceptual_vgg"] = files["vgg"]
            inputs["perceptual_lin"] = files["lin"]
        else:
            inputs["perceptual_embedding"] = public_classifier_file(ds)
    return inputs


def invert_shards(wildcards):
    """The class ranges of one (model, attack) inversion (inversion.classes_per_job)."""
    return inversion_shards(
        config, wildcards.dataset, wildcards.arch, wildcards.defense, wildcards.attack
    )


def invert_sharded(wildcards):
    """Whether rule invert merges rule invert_shard's parts instead of attacking itself."""
    return len(invert_shards(wildcards)) > 1


def invert_inputs(wildcards):
    """Rule invert's inputs: the attack's (one job over every class) or its class ranges'
    parts (several jobs, merged)."""
    if invert_sharded(wildcards):
        d = "results/inversion/{w.dataset}/{w.arch}/{w.defense}/seed{w.seed}/{w.attack}"
        d = d.format(w=wildcards)
        return {"parts": [f"{d}/parts/classes{a}-{b}.pt" for a, b in invert_shards(wildcards)]}
    return {
        **inversion_inputs(wildcards),
        "real_embeddings": f"results/inversion/{wildcards.dataset}/real_embeddings.pt",
    }


def invert_resource(key, when_attacking):
    """Resource ``key`` of the invert rule, ``when_attacking`` (a value or a function of the
    wildcards) for a job that attacks, little for one that merges parts (seconds, one CPU)."""
    merge = {"gpu": 0, "mem_mb": 4000, "runtime": 30, "gpu_mem_mb": 0}

    def value(wildcards):
        if invert_sharded(wildcards):
            return merge[key]
        return when_attacking(wildcards) if callable(when_attacking) else when_attacking

    return value


def reconstruction_inputs(wildcards):
    """best_images.pt of every (non-replicate) model of one (dataset, architecture) cell."""
    if not INV_ATTACKS:
        return {}
    return reconstruction_models(PLAN, wildcards.dataset, wildcards.arch, wildcards.attack)


def unseen_pixel_run(wildcards):
    for r in unseen_pixel_runs(PLAN):
        if r.dataset == wildcards.dataset and r.architecture == wildcards.arch:
            return r
    raise WorkflowError(f"no Unseen-Pixels model for {wildcards.dataset}/{wildcards.arch}")


def torchvision_weight_urls():
    """File name -> URL of every ImageNet weight file the config can ask for: the target
    architectures, the evaluation model (Inception-v3, docs/sources.md#evaluation-model) and
    VGG16 (the feature network of VGG16-LPIPS, docs/sources.md#ppdg). From the static table of
    atat.plan.weights_table: importing torchvision here would cost every dry run ~5 s."""
    wanted = [
        (arch, spec.get("weights", "IMAGENET1K_V1"))
        for arch, spec in config["architectures"].items()
        if arch in TORCHVISION_WEIGHTS
    ]  # ResNet-10 has none (from scratch; atat.plan.config)
    ev = config.get("evaluation_model") or {}
    if ev.get("pretrained") and not config.get("pretraining"):
        wanted.append((ev.get("architecture", "inception_v3"), ev.get("weights", "IMAGENET1K_V1")))
    face = config.get("face_embedding") or {}
    if face.get("pretrained") and not config.get("pretraining"):
        wanted.append((face.get("architecture", "resnet18"), "IMAGENET1K_V1"))
    if config.get("inversion"):
        wanted.append(("vgg16", "IMAGENET1K_V1"))
    try:
        urls = [torchvision_weights_url(arch, weights) for arch, weights in wanted]
    except ValueError as exc:
        raise WorkflowError(f"invalid configuration: {exc}") from None
    return {Path(url).name: url for url in urls}


# ---- inversion-stage weight files (rules of data.smk; `snakemake --lint`: functions live here)
from urllib.parse import urlsplit as _urlsplit  # noqa: E402

from atat.downloads import LPIPS_VGG_URL  # noqa: E402

LPIPS_FILE = f"{RES}/weights/lpips/vgg_v0.1.pth"


def _downloaded_generators():
    return sorted(n for n, g in (config.get("generators") or {}).items() if (g or {}).get("url"))


def _facenet_name():
    face = config.get("face_embedding") or {}
    if face.get("source") != "facenet" or not face.get("url"):
        return None
    return Path(_urlsplit(face["url"]).path).name


def _torchvision_file(arch, weights):
    return f"{RES}/weights/torchvision/{torchvision_weights_filename(arch, weights)}"


def generator_file(name):
    """StyleGAN2 pickle of generator ``name``: downloaded (``url``) or trained (``train``)."""
    if (config["generators"][name] or {}).get("url"):
        return f"{RES}/weights/stylegan2/{name}.pkl"
    return f"results/generators/{name}.pkl"


def facenet_file():
    """FaceNet (facenet-pytorch InceptionResnetV1) weights, or None unless source is facenet."""
    name = _facenet_name()
    return f"{RES}/weights/facenet/{name}" if name else None


def lpips_files():
    """VGG16-LPIPS: torchvision VGG16 ImageNet features + the LPIPS v0.1 linear layers."""
    return dict(vgg=_torchvision_file("vgg16", "IMAGENET1K_V1"), lin=LPIPS_FILE)


def evaluation_weights_file():
    """Pretrained init of the evaluation model (its architecture): the config's pretraining at the
    model's resolution, else torchvision's ImageNet file; None when trained from scratch."""
    ev = config.get("evaluation_model") or {}
    if not ev.get("pretrained"):
        return None
    if config.get("pretraining"):
        return pretrained_backbone_file(ev.get("architecture", "inception_v3"), ev["resolution"])
    return _torchvision_file(
        ev.get("architecture", "inception_v3"), ev.get("weights", "IMAGENET1K_V1")
    )


# ---- evaluation networks (rules of evaluation.smk)
EVAL_CFG = config.get("evaluation_model") or {}
FACE_CFG = config.get("face_embedding") or {}


def evaluation_model_inputs(wildcards):
    inputs = {"dataset": dataset_stamp(wildcards.dataset)}
    if EVAL_CFG.get("pretrained"):
        inputs["weights"] = evaluation_weights_file()  # ImageNet's file or the pretraining's
    return inputs


def evaluation_model_spec(wildcards):
    """Keyword arguments of atat.inversion.evaluation.train_evaluation_model."""
    return dict(
        dataset_root=f"{dataset_dir(wildcards.dataset)}/private",
        n_classes=n_classes(wildcards.dataset),
        resolution=int(EVAL_CFG["resolution"]),
        architecture=str(EVAL_CFG.get("architecture", "inception_v3")),
        aux_logits=bool(EVAL_CFG.get("aux_logits", True)),
        training=dict(EVAL_CFG["training"]),
        augmentation=EVAL_CFG.get("augmentation"),
        seed=int(EVAL_CFG.get("seed", 42)),
        num_workers=int(config["training"].get("num_workers", 0)),
        # atat.training.train's resume checkpoint (undeclared, as rule train_model's)
        resume_path=f"results/.resume/evaluation/{wildcards.dataset}/resume.pt",
    )


def evaluation_model_file(dataset):
    return f"results/evaluation/{dataset}/model.pt"


def public_classifier_file(dataset):
    """The classifier of ``dataset``'s public pool (made by train_face_embedding) -- δ_face's network
    on a face population, the prior-quality instrument on any synthetic one."""
    return f"results/face_embedding/{dataset}/model.pt"


def face_embedding_spec(dataset, seed=None):
    """Settings of the public pool's classifier of ``dataset`` (rule train_face_embedding), or of
    the prior-quality instrument's member trained with ``seed`` (rule
    train_instrument_classifier)."""
    resume = f"results/.resume/face_embedding/{dataset}"
    extra = {"weights_path": face_embedding_weights()} if FACE_CFG.get("pretrained") else {}
    return dict(
        **extra,
        dataset_dir=dataset_dir(dataset),
        architecture=FACE_CFG.get("architecture", "resnet18"),
        resolution=int(FACE_CFG["resolution"]),
        training=dict(FACE_CFG.get("training") or {}),
        augmentation=config["augmentation"],
        seed=int(FACE_CFG.get("seed", 0)) if seed is None else int(seed),
        num_workers=int(config["training"].get("num_workers", 0)),
        resume_path=f"{resume}/resume.pt" if seed is None else f"{resume}/seed{seed}/resume.pt",
    )


def face_embedding_weights():
    """Pretrained init of the public classifier (face_embedding.pretrained): the config's
    pretraining of its architecture at its resolution, else torchvision's ImageNet file."""
    arch = FACE_CFG.get("architecture", "resnet18")
    if config.get("pretraining"):
        return pretrained_backbone_file(arch, FACE_CFG["resolution"])
    return _torchvision_file(arch, "IMAGENET1K_V1")


def face_embedding_inputs(wildcards):
    """Inputs of a public classifier's training: the dataset, and its pretrained weights."""
    inputs = {"dataset": dataset_stamp(wildcards.dataset)}
    if FACE_CFG.get("pretrained"):
        inputs["weights"] = face_embedding_weights()
    return inputs


def prior_instrument_files(dataset, kind="model.pt"):
    """The ``kind`` files (model.pt, metrics.json) of the public classifiers that judge the
    priors trained on ``dataset`` in rule prior_quality -- the face embedding's classifier, then
    ``preconditions.prior_quality.classifiers`` - 1 more, seeds face_embedding.seed + 1, 2, ..."""
    first = int(FACE_CFG.get("seed", 0))
    n = int(config["preconditions"]["prior_quality"]["classifiers"])
    return [f"results/face_embedding/{dataset}/{kind}"] + [
        f"results/face_embedding/{dataset}/seed{first + i}/{kind}" for i in range(1, n)
    ]


# ---- the miniature's ImageNet (rules of pretrain.smk; docs/decisions.md#pretraining)
from atat.plan.config import pretraining_backbones, pretraining_exclusions  # noqa: E402

#: (backbone, resolution) -> {aux_logits, training} of every backbone the config pretrains
PRETRAIN = pretraining_backbones(config)
PRETRAIN_POPULATION = f"{RES}/pretraining/population"


def pretrained_backbone_file(backbone, resolution):
    """The weights file (torchvision state dict) rule pretrain_backbone writes."""
    return f"results/pretrained/{backbone}/{int(resolution)}px/weights.pth"


def pretrain_backbone_spec(wildcards):
    """Keyword arguments of atat.training.pretrain.pretrain_backbone for one backbone."""
    entry = PRETRAIN[(wildcards.backbone, int(wildcards.res))]
    return dict(
        dataset_root=PRETRAIN_POPULATION,
        architecture=wildcards.backbone,
        resolution=int(wildcards.res),
        training=dict(entry["training"]),
        augmentation=config["augmentation"],
        seed=int(config["pretraining"]["seed"]),
        aux_logits=entry["aux_logits"],
        num_workers=int(config["training"].get("num_workers", 0)),
        resume_path=f"results/.resume/pretrained/{wildcards.backbone}/{wildcards.res}px/resume.pt",
    )


def face_network_file(dataset):
    """The δ_face network of ``dataset`` for atat.inversion.evaluation.load_face_network, or
    None for non-face datasets (δ_face is NaN there, paper I.2)."""
    if not config["datasets"][dataset].get("faces"):
        return None
    if FACE_CFG.get("source") == "public_classifier":
        return public_classifier_file(dataset)
    return facenet_file()  # the downloaded VGGFace2 InceptionResnetV1 state dict


# ---- one output's own summary (rule output_summary; targeted rebuilds, issue 43)
from atat.analysis.paper import SUMMARY_SELECTIONS, record_files, summary_attacks  # noqa: E402
from atat.analysis.paper import output_summary_file, summary_selection  # noqa: E402
from atat.analysis.paper import PER_IMAGE_ENTRIES, per_image_selection  # noqa: E402
from atat.analysis.paper import output_per_image_file  # noqa: E402
from atat.analysis.summary import record_models  # noqa: E402

#: attacks whose columns every summary has (atat.analysis.summary.build_summary)
SUMMARY_ATTACKS = summary_attacks(PLAN)


def output_summary_inputs(wildcards):
    """The record files the output ``wildcards.entry`` reads (atat.analysis.paper.summary_selection)."""
    return record_files(PLAN, summary_selection(PLAN, wildcards.entry))


def output_summary_models(wildcards):
    """atat.analysis.summary.build_summary's models of the output ``wildcards.entry``."""
    return record_models(summary_selection(PLAN, wildcards.entry), config)


def output_per_image_inputs(wildcards):
    """The per-image files of the output ``wildcards.entry`` (atat.analysis.paper.per_image_selection)."""
    return per_image_selection(PLAN, wildcards.entry) or []


onstart:
    check_datasets_before_jobs()
    check_cluster_before_jobs()  # partitions and GPU names against sinfo (SLURM only)


# ---- runtime requests, the partition's limit and the GPU card (atat.plan.job_cost,
# atat.plan.gpu_memory, atat.plan.cluster)
# A GPU rule's runtime is its job's forecast (atat.plan.job_cost, A100 estimates) x 1.5, x 1.5
# more per retry (capped at the partition's limit), not a flat 48 h. Its GPU memory is planned
# the same way (atat.plan.gpu_memory): each GPU job asks for the smallest card of `gpu_cards`
# that holds it, one size larger per earlier attempt whose attempts log shows a CUDA
# out-of-memory error. The cluster's settings (`max_runtime_min`, `gpu_cards`,
# `gpu_card_resource`) come from profiles/slurm/cluster.yaml (`--config cluster_settings=<file>`
# or `none`), each key replaceable by --config. Before any job: every job whose request exceeds
# max_runtime_min, and every job that fits no card, is refused in one message. Under
# `device: cpu` no rule requests a GPU, nor does rule invert when it only merges its shards.
import functools  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402

from snakemake.io import apply_wildcards as _apply_wildcards  # noqa: E402

from atat.plan.cluster import GpuCardError as _GpuCardError  # noqa: E402
from atat.plan.cluster import SINFO_FORMAT as _SINFO_FORMAT  # noqa: E402
from atat.plan.cluster import check_gpu_cards as _check_gpu_cards  # noqa: E402
from atat.plan.cluster import cluster_name_problems as _cluster_name_problems  # noqa: E402
from atat.plan.cluster import load_cluster_settings as _load_cluster_settings  # noqa: E402
from atat.plan.cluster import job_partition as _job_partition  # noqa: E402
from atat.plan.cluster import parse_sinfo as _parse_sinfo  # noqa: E402
from atat.plan.cluster import retry_runtime_min as _retry_runtime_min  # noqa: E402
from atat.plan.cluster import unsupported_cards as _unsupported_cards  # noqa: E402
from atat.plan.gpu_memory import describe_job as _describe_job  # noqa: E402
from atat.plan.gpu_memory import job_gpu_mem_mb as _job_gpu_mem_mb  # noqa: E402
from atat.plan.job_cost import GpuRates as _GpuRates  # noqa: E402
from atat.plan.job_cost import RuntimeLimitError as _RuntimeLimitError  # noqa: E402
from atat.plan.job_cost import check_runtime_limit as _check_runtime_limit  # noqa: E402
from atat.plan.job_cost import class_shards as _class_shards  # noqa: E402
from atat.plan.job_cost import job_cost_for as _job_cost_for  # noqa: E402
from atat.plan.job_cost import oom_attempts as _oom_attempts  # noqa: E402
from atat.plan.job_cost import pick_gpu_card as _pick_gpu_card  # noqa: E402
from atat.plan.job_cost import runtime_request_min as _runtime_request_min  # noqa: E402

GPU_RATES = _GpuRates()
try:
    CLUSTER = _load_cluster_settings(config, workflow.basedir)
except ValueError as exc:
    raise WorkflowError(f"invalid cluster settings: {exc}") from None
MAX_RUNTIME_MIN = CLUSTER.get("max_runtime_min")
GPU_CARDS = CLUSTER["gpu_cards"]
GPU_CARD_RESOURCE = CLUSTER["gpu_card_resource"]
CARD_SIZES = [(c.name, c.mb) for c in GPU_CARDS]
#: whether the GPU rules ask for a GPU at all (config `device`)
USES_GPU = config.get("device", "auto") != "cpu"
#: wildcards a job's GPU memory does not depend on (its seed, epsilon, class range)
_NOT_SHAPE = ("seed", "eps", "start", "stop")


def _items(wildcards):
    """A job's wildcards as a memo key: text values, as Snakemake gives them to a rule."""
    return tuple((k, str(v)) for k, v in wildcards.items())


@functools.lru_cache(maxsize=None)
def _forecast_s_of(rule, items):
    return GPU_RATES.seconds(_job_cost_for(rule, dict(items), config))


def _forecast_s(rule, wildcards):
    return _forecast_s_of(rule, _items(wildcards))


def _request_min(rule, wildcards):
    return _runtime_request_min(_forecast_s(rule, wildcards))


def runtime_min(rule):
    """The runtime resource of ``rule``'s jobs: minutes requested from the job's forecast,
    grown per attempt (atat.plan.cluster.retry_runtime_min)."""

    def request(wildcards, attempt=1):
        minutes = _request_min(rule, wildcards)
        if MAX_RUNTIME_MIN and minutes > int(MAX_RUNTIME_MIN):
            raise WorkflowError(
                f"{rule} {'/'.join(map(str, wildcards.values()))}: {minutes} min requested, "
                f"over max_runtime_min = {MAX_RUNTIME_MIN}"
            )
        return _retry_runtime_min(minutes, attempt, MAX_RUNTIME_MIN)

    return request


def _on_gpu(rule, wildcards):
    """Whether the job of ``rule`` runs on a GPU: not under `device: cpu`, not rule invert
    merging its shards' parts."""
    return USES_GPU and not (rule == "invert" and invert_sharded(wildcards))


@functools.lru_cache(maxsize=None)
def _need_mb_of(rule, shape):
    try:
        return _job_gpu_mem_mb(rule, dict(shape), config)
    except ValueError as exc:
        if not GPU_CARDS:  # informative only: a network without a figure asks for any card
            return None
        raise WorkflowError(f"{rule} {dict(shape)}: {exc}") from None


def _shape(wildcards):
    return tuple((k, str(v)) for k, v in wildcards.items() if k not in _NOT_SHAPE)


def _need_mb(rule, wildcards):
    """Estimated GPU memory of the job (atat.plan.gpu_memory), MiB; None: no memory model."""
    return _need_mb_of(rule, _shape(wildcards))


#: the partition names (cluster settings `partitions`; None: SLURM's default partition)
PARTITIONS = CLUSTER.get("partitions")


def assign_partitions():
    """Resource slurm_partition of every rule that does not set one itself, from the cluster
    settings' `partitions` (atat.plan.cluster.job_partition): a GPU rule's job (one with a
    `gpu` resource) asks for the GPU partition when it requests a GPU and for the CPU one when
    it runs without (a merging invert, `device: cpu`); every other rule's job for the CPU one.
    The Snakefile calls this after its last rule. A profile's set-resources still wins."""
    if not PARTITIONS:
        return
    for each in workflow.rules:
        if "slurm_partition" in each.resources:
            continue
        if "gpu" in each.resources:
            each.resources["slurm_partition"] = _partition_function(each.name)
        else:
            each.resources["slurm_partition"] = _job_partition(PARTITIONS, False)


def _partition_function(rule):
    def partition(wildcards):
        return _job_partition(PARTITIONS, _on_gpu(rule, wildcards))

    return partition


def gpu_count(rule):
    """The gpu resource of ``rule``'s jobs: 1, or 0 for a job that runs on a CPU."""

    def gpu(wildcards):
        return int(_on_gpu(rule, wildcards))

    return gpu


def gpu_mem_mb(rule):
    """The gpu_mem_mb resource of ``rule``'s jobs (informative; 0 without a GPU)."""

    def mem(wildcards):
        return (_need_mb(rule, wildcards) or 0) if _on_gpu(rule, wildcards) else 0

    return mem


@functools.lru_cache(maxsize=None)
def _log_pattern(rule):
    return str(workflow.get_rule(rule).log[0])


def _attempts_log(rule, wildcards):
    """The attempts log of a job (workflow/scripts/_common.py: <log>.log -> <log>.attempts.log)."""
    pattern = _log_pattern(rule)
    try:  # plain {name} patterns (every GPU rule's); apply_wildcards for constrained ones
        log = pattern.format(**dict(wildcards.items()))
    except (KeyError, IndexError, ValueError):
        log = _apply_wildcards(pattern, wildcards)
    return log[: -len(".log")] + ".attempts.log"


def _gpu_card(rule, wildcards):
    """The card of a GPU job (gpu_cards), or None (no cards listed, no GPU, no memory model):
    the smallest card with the job's estimated GPU memory, one size larger per earlier attempt
    whose attempts log shows a CUDA out-of-memory error (never the same size again)."""
    if not GPU_CARDS or not _on_gpu(rule, wildcards):
        return None
    need = _need_mb(rule, wildcards)
    if need is None:
        return None
    log = _attempts_log(rule, wildcards)
    ooms = _oom_attempts(Path(log).read_text(errors="replace")) if os.path.isfile(log) else 0
    try:
        return _pick_gpu_card(need, CARD_SIZES, ooms)
    except ValueError as exc:
        name = "/".join(map(str, wildcards.values()))
        raise WorkflowError(f"{rule} {name}: {exc} ({log})") from None


def gpu_card(rule, resource):
    """Resource ``resource`` (gpu_model: sbatch --gpus=<card>:1; constraint: sbatch -C <card>)
    of ``rule``'s jobs: the card when gpu_card_resource names that resource, else None."""

    def card(wildcards, attempt=1):
        return _gpu_card(rule, wildcards) if GPU_CARD_RESOURCE == resource else None

    return card


@functools.lru_cache(maxsize=None)
def planned_gpu_jobs():
    """(rule, wildcards) of every GPU job of the config: its models' training, AutoAttack,
    HSIC and inversion (per shard), the pretrained backbones (embedded default), the evaluation
    models, the real-image embeddings."""
    out = []
    # the HSIC tables' models and every HSIC file `all` asks for itself (the grid's)
    hsic = {
        hsic_file(r) for t in table_rules(PLAN, "hsic_table") for r in hsic_table_runs(PLAN, t)[0]
    } | {t for t in all_targets() if t.startswith("results/hsic/")}
    for r in RUNS:
        cell = dict(dataset=r.dataset, arch=r.architecture, defense=r.defense, seed=r.seed)
        out.append(("train_model", cell))
        for e in [None] if AUTOATTACK_PER_MODEL else EPS:
            out.append(("autoattack", cell if e is None else {**cell, "eps": e}))
        if hsic_file(r) in hsic:
            out.append(("measure_hsic", cell))
        for a in run_attacks(config, r) if INV_ATTACKS else []:
            shards = _class_shards(config, r.dataset, r.architecture, r.defense, a)
            if len(shards) == 1:
                out.append(("invert", {**cell, "attack": a}))
            for start, stop in shards if len(shards) > 1 else []:
                out.append(("invert_shard", {**cell, "attack": a, "start": start, "stop": stop}))
    for backbone, res in sorted(PRETRAIN):
        out.append(("pretrain_backbone", dict(backbone=backbone, res=res)))
    for ds in sorted({r.dataset for r in RUNS}):
        if config.get("evaluation_model"):
            out.append(("train_evaluation_model", dict(dataset=ds)))
        if INV_ATTACKS:
            out.append(("real_embeddings", dict(dataset=ds)))
    return out


def planned_gpu_requests():
    """(rule, job name, requested minutes, forecast seconds) of every GPU job of the config."""
    out = []
    for rule, wc in planned_gpu_jobs():
        seconds = _forecast_s_of(rule, _items(wc))
        out.append((rule, "/".join(map(str, wc.values())), _runtime_request_min(seconds), seconds))
    return out


def planned_gpu_memory():
    """(rule, job name, MiB, shape, remedy) of every GPU job of the config with a memory model."""
    out, described = [], {}
    for rule, wc in planned_gpu_jobs():
        shape = _shape(wc)
        need = _need_mb_of(rule, shape)
        if need is None:
            continue
        if (rule, shape) not in described:
            described[(rule, shape)] = _describe_job(rule, wc, config)
        out.append((rule, "/".join(map(str, wc.values())), need, *described[(rule, shape)]))
    return out


# The checks before any job, in the process that plans the run (not in a job's own Snakemake)
if workflow.is_main_process:
    if MAX_RUNTIME_MIN:
        try:
            _check_runtime_limit(planned_gpu_requests(), int(MAX_RUNTIME_MIN))
        except _RuntimeLimitError as exc:
            raise WorkflowError(str(exc)) from None
    if GPU_CARDS and USES_GPU:
        try:
            _check_gpu_cards(planned_gpu_memory(), GPU_CARDS)
        except _GpuCardError as exc:
            raise WorkflowError(str(exc)) from None


def _submits_to_slurm():
    return getattr(workflow.executor_plugin, "name", None) == "slurm"


def check_cluster_before_jobs():
    """Before the first submission to SLURM (onstart; not in dry runs): the partitions, GPU
    models (GRES types), constraints (node features) and cards the jobs ask for exist on the
    cluster (`sinfo`), and no card of gpu_cards has a compute capability the installed torch
    build has no kernels for. Otherwise stop naming the bad name: sbatch would refuse every
    job asking for it, attempt after attempt."""
    if not _submits_to_slurm():
        return
    problems = []
    if any(c.capability for c in GPU_CARDS):
        from atat.base.device import build_arch_list

        problems += [
            f"gpu_cards lists {p}: remove it (atat.base.device)"
            for p in _unsupported_cards(GPU_CARDS, build_arch_list())
        ]
    try:
        proc = subprocess.run(
            ["sinfo", "-h", "-o", _SINFO_FORMAT], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"WARNING: cannot check partition and GPU names: sinfo: {exc}", file=sys.stderr)
        proc = None
    if proc is not None and proc.returncode == 0:
        requests = [
            (
                job.rule.name,
                job.resources.get("slurm_partition"),
                job.resources.get("gpu_model"),
                job.resources.get("constraint"),
                job.resources.get("gres"),
            )
            for job in workflow.dag.needrun_jobs()
        ]
        problems += _cluster_name_problems(
            requests,
            _parse_sinfo(proc.stdout),
            GPU_CARDS if USES_GPU else [],
            GPU_CARD_RESOURCE,
        )
    elif proc is not None:
        print(
            f"WARNING: sinfo failed, partition and GPU names unchecked: {proc.stderr}",
            file=sys.stderr,
        )
    if problems:
        raise WorkflowError(
            "sbatch would refuse these names (the cluster settings' partitions and gpu_cards, "
            "a profile's set-resources); nothing was submitted:\n  " + "\n  ".join(problems)
        )
