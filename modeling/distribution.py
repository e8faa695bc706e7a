"""`--distribution_strategy`: one_device, mirrored, multi_worker_mirrored, tpu; and
what a multi-worker run says when it loses a worker."""

from __future__ import annotations

import os
import re

import tensorflow as tf
from absl import logging

from common.errors import UserError
from common import run_control

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")


def split_cpu(num_devices: int) -> None:
    """Splits the CPU into `num_devices` logical devices (for Mirrored tests on a CPU).

    Must run before TensorFlow initialises its devices.
    """
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)]
    )


def create_strategy(
    name: str = "one_device",
    tpu: str | None = None,
    num_gpus: int | None = None,
    zone: str | None = None,
    project: str | None = None,
) -> tf.distribute.Strategy:
    """Builds the strategy named by `--distribution_strategy`.

    one_device: the first GPU if there is one, else the CPU. mirrored: all local GPUs, or
    all logical CPUs when there is no GPU. multi_worker_mirrored: the cluster in
    `TF_CONFIG`. tpu: the TPU named by `--tpu` ("" or "local" for a local TPU VM), in
    GCE `zone` and GCP `project` when given.
    """
    if name not in STRATEGIES:
        raise UserError(
            f"unknown --distribution_strategy {name!r}; choose one of {', '.join(STRATEGIES)}"
        )
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu="" if tpu in (None, "local") else tpu, zone=zone, project=project
        )
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    if name == "one_device":
        device = gpus[0].name if gpus else "/cpu:0"
        return tf.distribute.OneDeviceStrategy(device)
    devices = (
        [d.name for d in gpus[:num_gpus]]
        if gpus
        else [d.name for d in tf.config.list_logical_devices("CPU")]
    )
    logging.info("MirroredStrategy over %s", devices)
    return tf.distribute.MirroredStrategy(devices)


# What TensorFlow's collective ops raise when a peer worker is gone.
PEER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.AbortedError,
    tf.errors.InternalError,
    tf.errors.DeadlineExceededError,
    tf.errors.CancelledError,
)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run's files (model files, run_config.json,
    summaries, results, exports): the chief of a multi-worker cluster, any process
    without one. Every worker still takes part in the collective steps and saves (a
    worker's checkpoint goes to a temporary folder it then removes)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return True
    spec = resolver.cluster_spec().as_dict()
    return run_control.is_chief_task(spec, resolver.task_type, resolver.task_id or 0)


def worker_scratch_dir(strategy: tf.distribute.Strategy, output_dir: str, name="tmp") -> str:
    """Where a worker that is not the chief writes what it must write for the
    collective operations (a checkpoint, an evaluation, an export): a hidden folder of
    its own in output_dir, which it removes after use."""
    task_id = strategy.cluster_resolver.task_id
    return os.path.join(output_dir, f".worker_{task_id}_{name}")


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """How many processes (workers, chief, ...) the strategy's cluster has (1 without one)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    return sum(len(addresses) for addresses in spec.values()) if spec else 1


def lost_worker_message(
    strategy: tf.distribute.Strategy, error: Exception, step: int, latest: str | None
) -> str:
    """Which worker was lost (named in the collective error: "task:1"), its address,
    and what to do; `latest` is the checkpoint the workers will resume from."""
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec().as_dict()
    me = (resolver.task_type, resolver.task_id)
    text = str(getattr(error, "message", error))
    lost = [
        (job, int(task))
        for job, task in re.findall(r"/job:(\w+)/replica:\d+/task:(\d+)", text)
        if (job, int(task)) != me
    ]
    who = "another worker"
    if lost:
        job, task = lost[0]
        addresses = spec.get(job, [])
        address = addresses[task] if isinstance(addresses, list) and task < len(addresses) else "?"
        who = f"{job} {task} ({address})"
    where = f"the last checkpoint ({latest})" if latest else "the last checkpoint in output_dir"
    lines = text.strip().splitlines() or [type(error).__name__]
    cause = next((line for line in lines if "aborted" in line.lower()), lines[-1])
    return (
        f"Lost {who} of the multi-worker run after step {step} ({resolver.task_type} "
        f"{resolver.task_id} stopped: {cause.strip()}). Restart every worker with the "
        f"same command and TF_CONFIG: they resume from {where}."
    )
