"""tf.distribute helpers: which rows of a batch each replica owns, and the chief worker.

The training corpus is cut into B streams (batch rows). With N replicas, replica r owns rows
`r * B / N .. (r + 1) * B / N - 1` of every batch for the whole epoch, and carries their LSTM
state and pointer memory from one step to the next, so the streams stay contiguous. Every
worker reads the whole (deterministic) global batch and each replica slices its rows by its
`replica_id_in_sync_group`, which keeps the row ownership independent of how a strategy maps
replicas to devices and workers.
"""

import tensorflow as tf


def rows_per_replica(global_batch_size, strategy):
    """`B / N`; raises ValueError (naming --batch_size) when the batch does not split evenly.
    A run checks it before anything is written (`run_setup.prepare_workdir`)."""
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ValueError(
            f"batch_size={global_batch_size} (--batch_size) must be a multiple of the number "
            f"of replicas ({replicas}): every replica owns the same number of streams."
        )
    return global_batch_size // replicas


def mirrored_replicas(logical_cpus=0):
    """`(N, devices)`: the replicas `make_strategy("mirrored", logical_cpus)` makes, and the
    devices they are in words, read before it is made (no device is initialised).

    Every local GPU; without one, the `logical_cpus` CPU devices, or the one CPU.
    """
    gpus = len(tf.config.list_physical_devices("GPU"))
    if gpus:
        return gpus, f"{gpus} local GPU{'s' if gpus > 1 else ''}"
    if logical_cpus:
        return logical_cpus, f"--logical_cpus={logical_cpus} CPU devices"
    return 1, "the one CPU"


def replica_rows(nested, rows, replica_id):
    """Rows `replica_id * rows .. (replica_id + 1) * rows - 1` of every tensor in `nested`."""
    start = tf.cast(replica_id, tf.int32) * rows

    def take(value):
        return value[start:start + rows]

    return tf.nest.map_structure(take, nested)


def distribute_rows(strategy, nested, rows):
    """Per-replica values: each replica gets its `rows` rows of the global tensors `nested`.

    Args:
        strategy: a `tf.distribute.Strategy`.
        nested: nested structure of tensors with the global batch on axis 0.
        rows: int. Rows per replica.

    Returns:
        The same structure of per-replica values (plain tensors with the default strategy).
    """
    if nested is None:
        return None

    def value_fn(context):
        return replica_rows(nested, rows, context.replica_id_in_sync_group)

    return strategy.experimental_distribute_values_from_function(value_fn)


def gather_rows(strategy, nested):
    """The global tensors of per-replica values: rows concatenated in replica order.

    A collective under a multi-worker strategy: every worker must call it at the same point.
    Booleans travel as int32 (collectives do not take bool).
    """
    if nested is None:
        return None

    def gather(value):
        # A per-replica value (MirroredStrategy's PerReplica) has no dtype of its own: its
        # components have.
        dtype = strategy.experimental_local_results(value)[0].dtype
        if dtype == tf.bool:
            as_int = strategy.run(lambda v: tf.cast(v, tf.int32), args=(value,))
            return tf.cast(strategy.gather(as_int, axis=0), tf.bool)
        return strategy.gather(value, axis=0)

    return tf.nest.map_structure(gather, nested)


def is_chief(strategy):
    """Whether this process writes the run's files (always true without a cluster)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def worker_name(strategy):
    """"chief" or e.g. "worker_1": a name for this process's scratch files."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if is_chief(strategy) or resolver is None:
        return "chief"
    return f"{resolver.task_type}_{resolver.task_id}"


def make_strategy(name, logical_cpus=0):
    """The `tf.distribute.Strategy` named `name` ("default" -> None, "mirrored", "multi_worker").

    Args:
        name: "default" (one device), "mirrored" (all local GPUs, or the `logical_cpus` CPU
            devices where there is no GPU) or "multi_worker" (the cluster in TF_CONFIG).
        logical_cpus: int. Split the CPU into this many logical devices first (0: no split).
    """
    if logical_cpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * logical_cpus)
    if name == "mirrored":
        devices = None
        if logical_cpus and not tf.config.list_physical_devices("GPU"):
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name != "default":
        raise ValueError(f"strategy must be default, mirrored or multi_worker, got {name!r}.")
    return None
