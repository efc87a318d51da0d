"""Clients of an exported model: in-process, TF Serving REST and TF Serving gRPC.

Every client has `predict(signature_name, inputs)` taking and returning dicts of NumPy arrays
(strings as Python `str`), so callers do not care where the model runs. None of them imports
`psmm_tf`: an exported model needs TensorFlow only (and `tensorflow-serving-api` for gRPC).
"""

import http.client
import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import tensorflow as tf

from psmm_tf.export.versions import version_folders, version_number


class ServingError(RuntimeError):
    """The model rejected a request (bad input) or the server failed; the message says why."""


class ExportLoadError(RuntimeError):
    """An export folder that `tf.saved_model.load` cannot load (a cut `saved_model.pb`, missing
    variables); the message names the folder."""


# The dtype of every signature input, by name (`serving_module`'s, the same in each signature).
# A signature called with another dtype fails in TensorFlow before the model's own checks, with
# a message naming the input by position only ("input #1 (zero-based) was expected to be a
# int32 tensor"; the position is in the sorted order of the signature's input names), and
# converts a NumPy float array to int32 silently. So every client checks them by name first.
INPUT_DTYPES = {
    "texts": tf.string, "token_ids": tf.int32, "lengths": tf.int32, "lstm_state": tf.float32,
    "memory_hidden": tf.float32, "memory_ids": tf.int32, "memory_mask": tf.bool,
    "last_id": tf.int32, "vocabulary_fingerprint": tf.int32, "k": tf.int32,
    "stream_ids": tf.int32, "cache_hidden": tf.float32, "cache_ids": tf.int32,
    "cache_mask": tf.bool,
}


def checked_inputs(inputs, dtypes=None):
    """`inputs` as NumPy arrays of their signature dtypes; a ServingError names a wrong one.

    Args:
        inputs: dict of input name -> array-like.
        dtypes: dict of input name -> tf.DType (default: `INPUT_DTYPES`; names it does not
            know pass unchanged, for the server to judge).
    """
    dtypes = INPUT_DTYPES if dtypes is None else dtypes
    return {name: _as_array(name, value, dtypes[name]) if name in dtypes else np.asarray(value)
            for name, value in inputs.items()}


def _decoded(value):
    """`value` as a NumPy array, with byte strings decoded to `str`."""
    value = np.asarray(value)
    if value.dtype.kind in "OS":
        flat = [s.decode("utf-8") if isinstance(s, bytes) else s for s in value.reshape(-1)]
        return np.array(flat, dtype=object).reshape(value.shape)
    return value


def resolve_export_dir(path, version=None):
    """`path` if it holds a SavedModel, else its version folder `version` (default: the largest).

    Raises:
        FileNotFoundError: `path` is not a folder, holds no export, or `version` is not one of
            its versions (the message lists those it has).
    """
    if not tf.io.gfile.isdir(path):
        raise FileNotFoundError(f"No export folder {path}.")
    if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        name = os.path.basename(os.path.normpath(path))
        if version is not None and version_number(name) != version:
            raise FileNotFoundError(
                f"Version {version} was asked for, but {path} is the export of version "
                f"{name!r}; give the base folder of the versions.")
        return path
    folders = version_folders(tf.io.gfile.listdir(path))
    versions = list(folders)
    if not versions:
        raise FileNotFoundError(f"No saved_model.pb and no version folder in {path}.")
    complete = [v for v in versions
                if tf.io.gfile.exists(os.path.join(path, folders[v], "saved_model.pb"))]
    chosen = versions[-1] if version is None else version
    if chosen not in versions:
        raise FileNotFoundError(f"No version {version} in {path}; it holds versions "
                                f"{', '.join(map(str, versions))}.")
    if chosen not in complete:  # TF Serving would fail on it too: it is not skipped silently
        others = (f"the complete versions are {', '.join(map(str, complete))} (--model_version)"
                  if complete else "no version holds one")
        raise FileNotFoundError(
            f"{os.path.join(path, folders[chosen])} is not an export: no saved_model.pb in it "
            f"(an interrupted export, or a file?); {others}.")
    return os.path.join(path, folders[chosen])


class LocalClient:
    """Runs the SavedModel in this process (`tf.saved_model.load`).

    Args:
        path: str. An export folder (`.../3`) or the base holding versions.
        version: optional int. The version to load from the base (default: the latest).
    """

    def __init__(self, path, version=None):
        self.export_dir = resolve_export_dir(path, version)
        try:
            self.model = tf.saved_model.load(self.export_dir)
        except (OSError, ValueError, tf.errors.OpError) as err:  # OSError: a cut saved_model.pb
            detail = getattr(err, "message", None) or str(err)
            raise ExportLoadError(
                f"{self.export_dir} cannot be loaded as a SavedModel (damaged or incomplete: "
                f"{detail.splitlines()[0]}); export it again.") from None

    def input_dtypes(self, signature_name):
        """`{input name: tf.DType}` of a signature."""
        _, specs = self.model.signatures[signature_name].structured_input_signature
        return {name: spec.dtype for name, spec in specs.items()}

    def predict(self, signature_name, inputs):
        if signature_name not in self.model.signatures:
            raise ServingError(f"No signature {signature_name!r}; the export has "
                               f"{sorted(self.model.signatures)}.")
        dtypes = self.input_dtypes(signature_name)
        if set(inputs) != set(dtypes):
            raise ServingError(f"Signature {signature_name!r} takes inputs {sorted(dtypes)}; "
                               f"got {sorted(inputs)}.")
        tensors = {name: tf.constant(value)
                   for name, value in checked_inputs(inputs, dtypes).items()}
        try:
            outputs = self.model.signatures[signature_name](**tensors)
        except tf.errors.InvalidArgumentError as err:
            raise ServingError(_short_message(err.message)) from None
        return {name: _decoded(value.numpy()) for name, value in outputs.items()}


def _short_message(message):
    """The failed assertions of a TensorFlow error message (or all of it), without stacks."""
    failed = [line.strip() for line in message.splitlines()
              if line.strip().startswith("assertion failed:")]
    return "\n".join(failed) if failed else message


def _as_array(name, value, dtype):
    """`value` as a NumPy array of `dtype`, refusing lossy conversions (floats to ints, ...)."""
    if dtype == tf.string:
        array = np.asarray(value, dtype=object)
        if all(isinstance(v, (str, bytes)) for v in array.reshape(-1)):
            return array
        raise ServingError(f"`{name}` must hold strings.")
    array = np.asarray(value)
    kinds = {tf.bool: "b"}.get(dtype, "iub" if dtype.is_integer else "fiu")
    if array.size and array.dtype.kind not in kinds:
        raise ServingError(f"`{name}` must be {dtype.name}; got {array.dtype} values.")
    if dtype.is_integer and array.size and array.dtype.kind in "iu" and (
            array.min() < dtype.min or array.max() > dtype.max):
        raise ServingError(f"`{name}` holds values outside the range of {dtype.name}.")
    return array.astype(dtype.as_numpy_dtype)


class RestClient:
    """TF Serving's REST API: `POST {url}/v1/models/{name}[/versions/{v}]:predict`, JSON.

    Args:
        url: str. E.g. "http://localhost:8501".
        model_name: str. version: optional int. timeout: float seconds.
    """

    def __init__(self, url, model_name, version=None, timeout=30.0):
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018 (a bad port raises here)
        except ValueError as err:
            raise ValueError(f"{url!r} is not a URL ({err}); expected e.g. "
                             "http://localhost:8501.") from None
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{url!r} is not an http(s) URL with a host; expected e.g. "
                             "http://localhost:8501.")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}.")
        version_part = f"/versions/{version}" if version is not None else ""
        self.endpoint = f"{url.rstrip('/')}/v1/models/{model_name}{version_part}:predict"
        self.timeout = timeout

    def predict(self, signature_name, inputs):
        body = {"signature_name": signature_name,
                "inputs": {name: _decoded(value).tolist()
                           for name, value in checked_inputs(inputs).items()}}
        request = urllib.request.Request(
            self.endpoint, data=json.dumps(body).encode("utf-8"),
            headers={"Content-Type": "application/json"}, method="POST")
        try:
            data = _within_deadline(lambda: _post(request, self.timeout), self.timeout,
                                    self.endpoint)
        except urllib.error.HTTPError as err:
            text = err.read().decode("utf-8", "replace")
            try:
                text = json.loads(text).get("error", text)
            except (ValueError, AttributeError):
                pass
            raise ServingError(f"HTTP {err.code} from {self.endpoint}: {text}") from None
        except (urllib.error.URLError, OSError) as err:  # refused, unknown host, timeout
            reason = getattr(err, "reason", err)
            raise ServingError(f"No answer from {self.endpoint}: {reason}") from None
        except http.client.HTTPException as err:  # a bad status line, a reply cut short
            raise ServingError(f"{self.endpoint} broke the HTTP exchange (not TF Serving, or "
                               f"it failed mid-reply): {type(err).__name__}: "
                               f"{str(err)[:200]}") from None
        try:
            reply = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError):  # RecursionError: JSON nested too deep
            raise ServingError(f"{self.endpoint} answered something that is not JSON (not TF "
                               f"Serving?): {data[:200]!r}") from None
        outputs = reply.get("outputs") if isinstance(reply, dict) else None
        if not isinstance(outputs, dict):  # a single-output signature returns the bare value
            raise ServingError(f"Expected named outputs from {self.endpoint}, got {reply!r:.200}")
        try:
            return {name: _decoded(np.asarray(value, dtype=object if _is_text(value) else None))
                    for name, value in outputs.items()}
        except (ValueError, TypeError) as err:  # ragged or mixed lists
            raise ServingError(f"{self.endpoint} answered outputs that are not tensors (not "
                               f"TF Serving?): {str(err)[:200]}") from None


def _post(request, timeout):
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def _within_deadline(call, seconds, endpoint):
    """`call()`'s result, or ServingError once `seconds` have passed in all.

    A socket's timeout bounds each read, not the exchange: a server that trickles a byte a
    second never trips it. The call runs in a daemon thread, abandoned at the deadline.
    """
    result = {}

    def target():
        try:
            result["value"] = call()
        except BaseException as err:  # re-raised in the caller's thread
            result["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    # Short joins: a Ctrl-C the kernel hands to the waiting thread reaches this (main) thread's
    # handler at its next wake-up, not only at the deadline.
    deadline = time.monotonic() + seconds
    while thread.is_alive() and time.monotonic() < deadline:
        thread.join(min(0.25, max(deadline - time.monotonic(), 0.0)))
    if thread.is_alive():
        raise ServingError(f"No complete answer from {endpoint} within the timeout of "
                           f"{seconds:g} s (--timeout).")
    if "error" in result:
        raise result["error"]
    return result["value"]


def _is_text(value):
    while isinstance(value, list) and value:
        value = value[0]
    return isinstance(value, str)


class GrpcClient:
    """TF Serving's gRPC `PredictionService.Predict`.

    Args:
        target: str. "host:port". model_name: str. version: optional int. timeout: float.
    """

    def __init__(self, target, model_name, version=None, timeout=30.0):
        import grpc
        from tensorflow_serving.apis import prediction_service_pb2_grpc

        self._grpc = grpc
        self.target = target
        self.channel = grpc.insecure_channel(target)
        self.stub = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        self.model_name, self.version, self.timeout = model_name, version, timeout

    def predict(self, signature_name, inputs):
        from tensorflow_serving.apis import predict_pb2

        request = predict_pb2.PredictRequest()
        request.model_spec.name = self.model_name
        request.model_spec.signature_name = signature_name
        if self.version is not None:
            request.model_spec.version.value = self.version
        for name, value in checked_inputs(inputs).items():
            request.inputs[name].CopyFrom(tf.make_tensor_proto(_grpc_value(value)))
        try:
            response = self.stub.Predict(request, timeout=self.timeout)
        except self._grpc.RpcError as err:
            raise ServingError(f"{err.code().name} from {self.target} (model "
                               f"{self.model_name!r}): {err.details()}") from None
        return {name: _decoded(tf.make_ndarray(proto)) for name, proto in response.outputs.items()}

    def close(self):
        self.channel.close()


def _grpc_value(value):
    value = np.asarray(value)
    # NumPy's default integers are int64; the signatures take int32.
    return value.astype(np.int32) if value.dtype == np.int64 else value
