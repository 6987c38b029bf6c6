"""``comgra_like.watch(model)``: every module's inputs, outputs, their gradients, its
parameters and their gradients, recorded without registering tensors by hand
(torchexplorer 1.1.2's ``watch`` and ``attach``, with the same parameters and defaults).

The recording is an ordinary trial: the tensors are registered tensors of the step (node
= the module invocation, role = ``input 0``, ``output logits``, ...), so every page of
the GUI shows them; on top come one histogram per tensor and recorded step, the module
graph of each step and a report of what was hooked and skipped
(``Group.read_histograms``, ``read_module_graph``, ``read_watch_report``).
The driver is ``comgra_like/record/hooks.py``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import CallOrderError, ConfigurationError, StorageError
from ..format.files import files_for, is_object_store, s3_endpoint
from ..format.schema import TRIAL_ID_PATTERN
from ..format.trial_config import flatten_config
from ..objects import DecisionMakerForRecordingsFrequencyPerType
from .hooks import LOG_OPTIONS, TRAINING, Settings, Watcher
from .lifecycle import Stage
from .metric_collect import Collector
from .metric_config import resolve_config
from .optimizer import OptimizerWatch, check_optimizers, check_scaler, parameter_names
from .ranks import common_time

log = logging.getLogger("comgra_like")

BACKENDS = ("standalone", "none", "wandb")
DEFAULT_BACKEND = "standalone"

# watched module -> its watcher, for attach()
_WATCHERS: dict[int, Watcher] = {}


class WatchHandle:
    """What ``watch`` returns: stops watching (``unwatch()``, or leaving a ``with``
    block), and says where the recording is."""

    def __init__(self, watcher: Watcher, recorder, own: bool, backend: str,
                 metrics: Collector | None = None, flight=None, optimizer_watch=None):
        self._watcher = watcher
        self.recorder = recorder
        self.own = own
        self.backend = backend
        self._metrics = metrics
        self._flight = flight  # watch(flight_recorder=): record/flight_watch.py
        #: watch(optimizer=): record/optimizer.py's OptimizerWatch (None without one)
        self.optimizer_watch = optimizer_watch

    @property
    def group_path(self) -> Path:
        """The group folder (``comgra --path`` opens it)."""
        return self.recorder.group_path

    @property
    def location(self) -> str:
        """The group as ``comgra --path`` takes it: a folder, or its ``s3://`` URI."""
        return files_for(self.group_path).display(self.group_path)

    @property
    def trial_id(self) -> str:
        return self.recorder.trial_id

    @property
    def module(self) -> torch.nn.Module:
        return self._watcher.module

    @property
    def watching(self) -> bool:
        return not self._watcher.closed

    @property
    def watcher(self) -> Watcher:
        """watch()'s driver (``record/hooks.py``), public for tests and benchmarks: its
        counters ``hooks_installed``, ``graphs_hashed`` and ``steps_recorded``."""
        return self._watcher

    def report(self) -> dict:
        """Which modules are hooked, which skipped and why (also in the recording)."""
        return self._watcher.report()

    def flush(self) -> None:
        """Everything recorded so far on disk (the open step is sent first when watch
        drives the steps, so call it between steps)."""
        if self.own:
            self._watcher.end_step()
        if self._metrics is not None:
            if self.own:
                self._metrics.finish()
            self._metrics.flush()
        for recorder in self._watcher.recorders():
            recorder.flush()

    def gradients_before_clipping(self) -> None:
        """Read the parameters' gradient norms now as the norm before clipping of the
        coming optimizer step: call it after the gradients are final and unscaled, before
        clipping (Lightning's ``on_before_optimizer_step``; docs/OPTIMIZER.md). Returns at
        once on a step that is not recorded; never raises into training."""
        if self.optimizer_watch is None:
            raise ConfigurationError(
                "gradients_before_clipping() needs watch(model, optimizer=your_optimizer)")
        self.optimizer_watch.gradients_before_clipping()

    def log_loss(self, loss: Any, step: int | None = None) -> None:
        """Record the loss (a number or a one-element tensor) of the current step, or of
        ``step``, as the metric ``loss`` of the root module (monitorch's loss lens; needs
        ``metrics=``, e.g. ``metrics={}``), and give it to the flight recorder (its
        loss-spike trigger; the current step only)."""
        if self._metrics is None and self._flight is None:
            raise ConfigurationError(
                "log_loss() stores the loss with the per-module metrics: pass metrics= to "
                "watch() (metrics={} records the loss alone), or flight_recorder= for its "
                "loss-spike trigger")
        if self._flight is not None and step is None:
            self._flight.observe_loss(loss)
        if self._metrics is not None:
            self._metrics.log_loss(loss, step)

    def unwatch(self) -> None:
        """Remove every hook; the last recorded step is written. With its own trial the
        recording is finalized (compacted, marked finished)."""
        watcher = self._watcher
        if watcher.closed:
            return
        try:
            if self._flight is not None:
                self._flight.close()
            if self._metrics is not None:
                self._metrics.close()
            watcher.close()
            if self.optimizer_watch is not None:
                self.optimizer_watch.close()
        finally:
            for key, w in list(_WATCHERS.items()):
                if w is watcher:
                    del _WATCHERS[key]
            if self.own:
                for recorder in self._watcher.recorders():
                    recorder.finalize()

    @property
    def validation_trial_id(self) -> str | None:
        """The trial of the validation passes (``<trial>.validation``), None until the
        first one is recorded (and with ``recorder=``: the recorder's loop numbers them)."""
        rec = self._watcher.val_rec
        return None if rec is None else rec.trial_id

    close = unwatch

    def __enter__(self) -> WatchHandle:  # noqa: PYI034 - typing.Self needs Python 3.11
        return self

    def __exit__(self, *exc) -> None:
        self.unwatch()

    def __repr__(self) -> str:
        state = "watching" if self.watching else "stopped"
        return (f"WatchHandle({type(self.module).__name__}, {state}, group "
                f"{self.location!r}, trial {self.trial_id!r})")


def watch(
    module: torch.nn.Module,
    log: Sequence[str] = ("io", "io_grad", "params", "params_grad"),
    log_freq: int = 500,
    ignore_io_grad_classes: Sequence[type] = (),
    disable_inplace: bool = False,
    bins: int = 30,
    sample_n: int | None = 1000,
    reject_outlier_proportion: float = 0.1,
    time_log: tuple[str, Callable[[torch.nn.Module, int], Any]] | None = (
        "step", lambda module, step: step),
    delay_log_multi_backward: bool = False,
    backend: str = DEFAULT_BACKEND,
    standalone_dir: str | os.PathLike = "./torchexplorer_standalone",
    standalone_port: int = 8080,
    verbose: bool = True,
    *,
    recorder=None,
    name: str | None = None,
    trial_id: str | None = None,
    eval_mode: str = "record",
    seed: int = 0,
    metrics: Mapping | None = None,
    config: Mapping | None = None,
    flight_recorder=None,
    optimizer=None,
    scaler=None,
    micro_batch_gradients: bool | None = None,
) -> WatchHandle:
    """Record every module of ``module``: inputs, outputs, their per-sample gradient
    norms, parameters and parameter gradients, as tensors of the recording and as
    histograms over time, with the module graph of each recorded step.

    The parameters up to ``verbose`` are torchexplorer 1.1.2's, with its defaults.
    ``backend``: ``'standalone'`` (the default: a recording under ``standalone_dir`` that
    ``comgra --path <standalone_dir> --port <standalone_port>`` opens; no account or
    server needed while training) or ``'none'`` (the module graph and the watch report
    only). ``standalone_dir`` may be an ``s3://bucket/prefix`` location, with the
    recorder's settings (the AWS_* environment variables; ``AWS_ENDPOINT_URL`` for an
    S3-compatible server); a bucket that is missing or cannot be reached is a
    StorageError here, before any hook is in place. ``recorder``: an existing
    ``ComgraRecorder``; the watched modules are then recorded into its trial on the
    steps it records (inside its iterations), next to the tensors registered by hand,
    and its loop decides steps and gradients.

    Keyword-only extras: ``name`` of the root module (default ``model``, or the name
    the recorder tracks it under); ``trial_id`` of the own trial (default
    ``watch-<date>-<time>``); ``eval_mode``: ``'record'`` records the first forward in
    eval mode after each recorded training step (and one before the first training
    step) as type of execution ``validation``, in the trial ``<trial_id>.validation``
    beside the training trial, numbered with the training step it followed (-1: before
    any; ``WatchHandle.validation_trial_id``), ``'skip'`` does not (the watch report says
    so); ``seed`` of the histogram sampling;
    ``metrics``: per-module metrics in Taiyi's config format (``comgra_like.metrics``),
    computed on their own schedules whether or not the step is recorded
    (``Group.read_metrics``); the steps are watch's (or the recorder's) step numbers;
    ``config``: the trial's hyperparameters (JSON values, nested dicts flattened with
    dots; ``Group.read_config``, the Compare page), stored in the own trial and its
    validation trial; with ``recorder=`` pass it to the ``ComgraRecorder`` instead.
    ``flight_recorder``: a ``comgra_like.FlightRecorder`` armed on every training step
    (parameters, their gradients and updates, the model's output; docs/FLIGHT.md); with
    ``keep_state=True`` it keeps the optimizer's state too when ``optimizer`` is given.
    ``optimizer``: a ``torch.optim.Optimizer`` or a list of them (docs/OPTIMIZER.md): a
    step is then one optimizer step (the micro-batches of gradient accumulation are its
    iterations), the gradient the step uses is recorded as the loss group ``optimizer``
    (accumulated, unscaled, clipped), with the update and the optimizer's state as
    metrics ``optimizer/<quantity>`` per parameter (``Group.read_optimizer_state``);
    ``scaler``: the loop's ``torch.amp.GradScaler``; ``micro_batch_gradients``: record
    each backward's gradients as a loss group of its own too (default False with an
    optimizer).

    Returns a :class:`WatchHandle` (``unwatch()``, or use it in a ``with`` block).
    """
    if not isinstance(module, torch.nn.Module):
        raise ConfigurationError(f"watch() needs a torch.nn.Module, got {type(module).__name__}")
    if id(module) in _WATCHERS:
        raise ConfigurationError(
            f"{type(module).__name__} is watched already; call unwatch() on the handle the "
            "first watch() returned before watching it again")
    what = _check_log(log)
    if type(log_freq) is not int or log_freq < 1:
        raise ConfigurationError(f"log_freq must be a positive integer, got {log_freq!r}")
    if type(bins) is not int or bins < 1:
        raise ConfigurationError(f"bins must be a positive integer, got {bins!r}")
    if sample_n is not None and (type(sample_n) is not int or sample_n < 1):
        raise ConfigurationError(
            f"sample_n must be a positive integer or None (every value), got {sample_n!r}")
    if not isinstance(reject_outlier_proportion, (int, float)) or isinstance(
            reject_outlier_proportion, bool) or not 0 <= reject_outlier_proportion < 1:
        raise ConfigurationError(
            "reject_outlier_proportion must be a number from 0 (keep every value) to below 1, "
            f"got {reject_outlier_proportion!r}")
    classes = tuple(ignore_io_grad_classes or ())
    if not all(isinstance(c, type) for c in classes):
        raise ConfigurationError(
            "ignore_io_grad_classes must hold module classes (e.g. [torch.nn.ReLU]), got "
            f"{list(ignore_io_grad_classes)!r}")
    if time_log is None:
        time_log = ("step", lambda module, step: step)
    if (not isinstance(time_log, tuple) or len(time_log) != 2 or not callable(time_log[1])):
        raise ConfigurationError(
            "time_log must be a pair (axis name, function(module, step) -> number), e.g. "
            "('step', lambda module, step: step)")
    if eval_mode not in ("record", "skip"):
        raise ConfigurationError(f"eval_mode must be 'record' or 'skip', got {eval_mode!r}")
    if backend == "wandb":
        raise ConfigurationError(
            "backend='wandb' is torchexplorer's; comgra_like records to files instead: use "
            "backend='standalone' (the default; open the recording with comgra --path "
            "<standalone_dir>), backend='none' (structure only), or recorder=<your "
            "ComgraRecorder> to record into an existing trial")
    if backend not in ("standalone", "none"):
        raise ConfigurationError(
            f"backend must be 'standalone' or 'none', got {backend!r}")
    if recorder is not None and backend == "none":
        raise ConfigurationError(
            "backend='none' records only the structure into a trial of its own; drop "
            "recorder= or use backend='standalone'")

    if config is not None and recorder is not None:
        raise ConfigurationError(
            "watch(recorder=..., config=...): the trial is the recorder's; pass config= to "
            "its ComgraRecorder(...) instead")
    flat_config = flatten_config(config)  # checked before anything is created

    structure_only = backend == "none"
    own = recorder is None
    specs = None
    if metrics is not None:  # checked before anything is created
        tracked = None if own else recorder.tracked_name(module)
        specs = resolve_config(module, metrics, tracked or name or "model")
    if flight_recorder is not None:  # issue 30 (record/flight_watch.py, docs/FLIGHT.md)
        _check_flight(flight_recorder, own)
    optimizers = None
    if optimizer is not None:  # issue 32 (record/optimizer.py, docs/OPTIMIZER.md)
        optimizers = check_optimizers(optimizer)
        check_scaler(scaler)
    elif scaler is not None or micro_batch_gradients is not None:
        raise ConfigurationError(
            "scaler= and micro_batch_gradients= go with optimizer=: watch(model, "
            "optimizer=opt, scaler=scaler)")
    if micro_batch_gradients is not None and not isinstance(micro_batch_gradients, bool):
        raise ConfigurationError(
            f"micro_batch_gradients must be True or False, got {micro_batch_gradients!r}")
    if own:
        root = name if name is not None else "model"
        _check_name(root)
        recorder = _own_recorder(standalone_dir, trial_id, backend, flat_config)
        try:
            recorder.track_module(root, module)
        except BaseException:
            recorder.finalize()
            raise
    else:
        root = _attach_to_recorder(recorder, module, name)
    if disable_inplace:
        for sub in module.modules():
            if hasattr(sub, "inplace"):
                sub.inplace = False
    settings = Settings(
        log=() if structure_only else what, log_freq=log_freq,
        ignore_io_grad_classes=classes, time_name=str(time_log[0]), time_fn=time_log[1],
        delay_log_multi_backward=bool(delay_log_multi_backward), eval_mode=eval_mode,
        structure_only=structure_only,
        histogram={"bins": bins, "sample_n": sample_n,
                   "reject_outlier_proportion": float(reject_outlier_proportion),
                   "seed": int(seed)},
        verbose=bool(verbose),
        micro_batch_gradients=optimizers is None or bool(micro_batch_gradients))
    make_validation = None
    if own:
        def make_validation():
            validation = _own_recorder(standalone_dir, validation_trial(recorder.trial_id),
                                       backend, flat_config)
            validation.track_module(root, module)
            return validation
    watcher = Watcher(module, recorder, own, root, settings, make_validation)
    for sub in module.modules():
        _WATCHERS.setdefault(id(sub), watcher)
    collector = None
    if specs is not None:
        # registered after the watcher's hooks, so its step counter has moved on already
        step_of = ((lambda: watcher.train_count - 1) if own else
                   (lambda: recorder.training_step if recorder.stage != Stage.IDLE else None))
        collector = Collector(module, specs, root, recorder.writer, step_of)
    flight = None
    if flight_recorder is not None and getattr(recorder, "trial_path", None) is not None:
        from .flight_watch import FlightDriver

        flight = FlightDriver(flight_recorder, module, root, recorder,
                              watcher.continues_open_step if own else None)
        if (optimizers is not None and flight_recorder.state is not None
                and not flight_recorder.state.optimizers):
            flight_recorder.keep_optimizer(optimizers)  # keep_state: for the replay
    optimizer_watch = None
    if optimizers is not None and not structure_only:
        optimizer_watch = _watch_optimizers(watcher, module, root, recorder, own, optimizers,
                                            scaler)
    handle = WatchHandle(watcher, recorder, own, backend, collector, flight, optimizer_watch)
    if own:
        msg = (f"comgra_like.watch: recording {type(module).__name__} into "
               f"{handle.location} (trial {recorder.trial_id}); open it with: "
               f"{_open_command(handle.location, standalone_port)}")
        if verbose:
            _log.warning(msg)
        else:
            _log.info(msg)
    return handle


_log = log


def _watch_optimizers(watcher: Watcher, module, root: str, recorder, own: bool,
                      optimizers: list, scaler) -> OptimizerWatch:
    """The optimizers' step hooks (record/optimizer.py), recording while a training step
    of ``recorder`` is recorded (watch's own step, or the user loop's)."""
    if own:
        def recording() -> bool:
            return watcher.open == TRAINING and watcher.rec.is_recording
    else:
        def recording() -> bool:
            return recorder.is_recording and recorder.stage != Stage.IDLE
    ow = OptimizerWatch(optimizers, module, parameter_names(module, root), recorder,
                        recording, scaler=scaler)
    ow.unsubscribe = recorder.subscribe(ow)
    watcher.optimizer = ow
    return ow


def _check_flight(flight_recorder, own: bool) -> None:
    from .flight import FlightRecorder

    if not isinstance(flight_recorder, FlightRecorder):
        raise ConfigurationError("flight_recorder must be a comgra_like.FlightRecorder(...), "
                                 f"got {type(flight_recorder).__name__}")
    if not own:
        raise ConfigurationError(
            "watch(recorder=..., flight_recorder=...): pass flight_recorder= to your "
            "ComgraRecorder(...) instead; it then sees every step of your loop")
    flight_recorder.check_free()


def attach(tensor: torch.Tensor, parent_module: torch.nn.Module, name: str) -> torch.Tensor:
    """Record ``tensor`` as if it were the output of a module ``<parent>.<name>``, from
    inside ``parent_module``'s ``forward`` (torchexplorer's ``attach``). Returns the
    tensor unchanged; on steps that are not recorded this does nothing else."""
    watcher = _WATCHERS.get(id(parent_module))
    if watcher is not None and watcher.active:
        if not isinstance(name, str) or not name or "#" in name:
            raise ConfigurationError(
                f"attach(..., name={name!r}): the name must be a non-empty string without '#'")
        try:
            watcher.attach(tensor, parent_module, name)
        except Exception as e:  # noqa: BLE001 - never into training (record/guard.py)
            watcher.guard.failed("attach()", e)
    return tensor


def validation_trial(trial_id: str) -> str:
    """The trial that holds the validation passes of the own trial ``trial_id``."""
    return f"{trial_id}.validation"


def _check_log(log: Sequence[str]) -> tuple[str, ...]:
    if isinstance(log, str):
        log = [log]
    what = tuple(dict.fromkeys(log))
    wrong = [x for x in what if x not in LOG_OPTIONS]
    if wrong:
        raise ConfigurationError(
            f"log may hold {', '.join(LOG_OPTIONS)}; got {wrong!r}")
    return what


def _check_name(root: str) -> None:
    if not isinstance(root, str) or not root or "." in root or "#" in root:
        raise ConfigurationError(
            f"name={root!r}: the root module's name must be non-empty, without '.' or '#'")


def _standalone_location(standalone_dir: str | os.PathLike) -> tuple[str | Path, str]:
    """(root, group) of the group folder ``standalone_dir``: a local folder, or an
    ``s3://bucket/prefix`` location (its last part is the group), as the recorder
    takes them."""
    if not isinstance(standalone_dir, (str, os.PathLike)):
        raise ConfigurationError(
            "standalone_dir must be a folder or an s3://bucket/prefix location, got "
            f"{type(standalone_dir).__name__}")
    if not is_object_store(standalone_dir):
        folder = Path(standalone_dir).expanduser().resolve()
        return folder.parent, folder.name
    key = files_for(standalone_dir).key(standalone_dir)  # the AWS_* settings checked here
    bucket, _, rest = key.partition("/")
    parent, _, group = rest.rpartition("/")
    if not bucket or not group:
        raise ConfigurationError(
            f"standalone_dir={str(standalone_dir)!r} names no folder inside a bucket: the "
            "recording is a group folder, e.g. s3://my-bucket/torchexplorer_standalone")
    return f"s3://{bucket}/{parent}" if parent else f"s3://{bucket}", group


def _open_command(location: str, port: int) -> str:
    """The command that opens the recording (with the S3 server the environment names,
    for a shell that lacks the AWS_ENDPOINT_URL this process has)."""
    endpoint = s3_endpoint() if is_object_store(location) else None
    flag = f" --s3-endpoint {endpoint}" if endpoint else ""
    return f"comgra --path {location}{flag} --port {port}"


def _own_recorder(standalone_dir: str | os.PathLike, trial_id: str | None, backend: str,
                  config: Mapping | None = None):
    from .recorder import ComgraRecorder

    root, group = _standalone_location(standalone_dir)
    if trial_id is None:
        trial_id = "watch-" + time.strftime("%Y%m%d-%H%M%S", time.localtime(common_time()))
    if not isinstance(trial_id, str) or not TRIAL_ID_PATTERN.match(trial_id):
        raise ConfigurationError(
            f"trial_id {trial_id!r} is not a valid trial id: letters, digits, '.', '_' and "
            "'-', not starting with '.'")
    try:
        return ComgraRecorder(
            root, group, trial_id,
            DecisionMakerForRecordingsFrequencyPerType(1),
            max_num_batch_size_to_record=0,
            calculate_svd_and_other_expensive_operations_of_parameters=False,
            config=config)
    except StorageError as e:  # before any hook is in place: training is untouched
        raise StorageError(f"watch(standalone_dir={str(standalone_dir)!r}) cannot record "
                           f"there: {e}") from None


def _attach_to_recorder(recorder, module: torch.nn.Module, name: str | None) -> str:
    from .recorder import ComgraRecorder

    if not isinstance(recorder, ComgraRecorder):
        raise ConfigurationError(
            f"recorder= must be a comgra_like.ComgraRecorder, got {type(recorder).__name__}")
    if not recorder.comgra_is_active:
        raise ConfigurationError(
            "recorder= is inactive (comgra_is_active=False), so nothing would be recorded; "
            "pass an active recorder or drop recorder=")
    if recorder.finalized:
        raise CallOrderError("recorder= was finalized already; watch before finalize()")
    tracked = recorder.tracked_name(module)
    if tracked is not None:
        if name is not None and name != tracked:
            raise ConfigurationError(
                f"the recorder tracks this module as {tracked!r}; drop name= or pass "
                f"name={tracked!r}")
        return tracked
    root = name if name is not None else "model"
    _check_name(root)
    if recorder.stage != Stage.IDLE or recorder.recorded_steps:
        raise CallOrderError(
            "watch(module, recorder=...) needs the module tracked by the recorder, and "
            "track_module() must come before the first start_batch(): call "
            f"recorder.track_module({root!r}, module) at the start, or call watch() before "
            "the first start_batch()")
    recorder.track_module(root, module)
    return root
