"""`--distribution_strategy`: one_device, mirrored, multi_worker_mirrored, tpu."""

from __future__ import annotations

import tensorflow as tf
from absl import logging

from common.errors import UserError

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
