"""Reads what a pipeline run did from ML Metadata: per-node state and results.

Used by the CLI's closing summary and by the tests, so both report the same
figures: the Evaluator's accuracy, whether the model was blessed, and where
the Pusher put it.
"""
import dataclasses
import os
from typing import Dict, List, Optional, Tuple

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from leantfx import evaluation_results
from leantfx.components.baselines import report as baselines_report
from leantfx.components.baselines import spec as baselines_spec
from leantfx.components.infra_validator import spec as infra_spec
from leantfx.components.model_card import spec as card_spec
from leantfx.components.relative_gate import spec as gate_spec

_STATE_NAMES = {
    v: k.lower()
    for k, v in metadata_store_pb2.Execution.State.items()
}


INFRA_VALIDATOR_NODE = 'InfraValidator'
BASELINES_NODE = 'Baselines'
MODEL_CARD_NODE = 'ModelCardGenerator'


@dataclasses.dataclass(frozen=True)
class NodeExecution:
  """The newest execution of one pipeline node."""
  node_id: str
  execution_id: int
  state: str  # 'complete', 'cached', 'failed', 'running', ...
  outputs: Dict[str, List[metadata_store_pb2.Artifact]]


@dataclasses.dataclass(frozen=True)
class RunSummary:
  """The outcome of the newest run of a pipeline."""
  executions: Dict[str, NodeExecution]
  accuracy: Optional[float]
  example_count: Optional[int]
  blessed: Optional[bool]
  pushed: bool
  pushed_path: Optional[str]
  # True when the model equalled the newest pushed version, so no new
  # version was written (see components/versioned_pusher).
  reused_version: bool
  evaluation_uri: Optional[str]
  # Every overall metric of the candidate by TFMA name (a regression's
  # mean_absolute_error, root_mean_squared_error, r2_score, ...).
  metrics: Dict[str, float] = dataclasses.field(default_factory=dict)
  # The pushed serving graph: 'ops' and 'call_ms_batch1'/'call_ms_batch32'
  # when the Pusher measured them (a new version), else empty.
  serving_graph: Dict[str, float] = dataclasses.field(default_factory=dict)
  # The InfraValidator's verdict (None: it did not run), why not, and its
  # figures ('latency_p50_ms_batch1', ..., 'seconds').
  infra_blessed: Optional[bool] = None
  infra_reason: Optional[str] = None
  infra: Dict[str, float] = dataclasses.field(default_factory=dict)
  # With --slice-by: each slice's metrics by TFMA name ('example_count'
  # among them), by slice name ('island=Biscoe'), and the Evaluator's
  # failed per-slice thresholds, one line each.
  slices: Dict[str, Dict[str, float]] = dataclasses.field(
      default_factory=dict)
  slice_failures: Tuple[str, ...] = ()
  # The folder of the pushed version's model card (None: none written).
  model_card_dir: Optional[str] = None
  # The Baselines component's document (components/baselines/report.py),
  # and the relative gate the Evaluator blessed by ({'metric', 'bounds'};
  # components/relative_gate/rule.py); None where they did not run.
  baselines: Optional[Dict] = None
  gate: Optional[Dict] = None

  def model_card_page(self) -> Optional[str]:
    """The model card's HTML page, or None."""
    if not self.model_card_dir:
      return None
    return os.path.join(self.model_card_dir, card_spec.HTML_FILE)


def open_store(metadata_path: str) -> metadata_store.MetadataStore:
  """Opens the SQLite ML Metadata store read-write (it must exist)."""
  config = metadata_store_pb2.ConnectionConfig()
  config.sqlite.filename_uri = metadata_path
  config.sqlite.connection_mode = (
      metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE)
  return metadata_store.MetadataStore(config)


def _custom_int(artifact: metadata_store_pb2.Artifact, key: str) -> int:
  value = artifact.custom_properties.get(key)
  return value.int_value if value is not None else 0


def _custom_str(artifact: metadata_store_pb2.Artifact,
                key: str) -> Optional[str]:
  value = artifact.custom_properties.get(key)
  return value.string_value if value is not None else None


def node_executions(store: metadata_store.MetadataStore, pipeline_name: str,
                    since_ms: int = 0) -> Dict[str, NodeExecution]:
  """Returns the newest execution of each node created at or after since_ms.

  Args:
    store: the ML Metadata store.
    pipeline_name: the TFX pipeline name.
    since_ms: ignore executions created before this epoch time (ms).

  Returns:
    node id -> NodeExecution.
  """
  pipeline_ctx = store.get_context_by_type_and_name('pipeline', pipeline_name)
  if pipeline_ctx is None:
    return {}
  prefix = f'{pipeline_name}.'
  result = {}
  for ctx in store.get_contexts_by_type('node'):
    if not ctx.name.startswith(prefix):
      continue
    executions = [
        e for e in store.get_executions_by_context(ctx.id)
        if e.create_time_since_epoch >= since_ms
    ]
    if not executions:
      continue
    newest = max(executions, key=lambda e: e.id)
    outputs: Dict[str, List[metadata_store_pb2.Artifact]] = {}
    events = [
        e for e in store.get_events_by_execution_ids([newest.id])
        if e.type == metadata_store_pb2.Event.OUTPUT
    ]
    artifacts = {
        a.id: a for a in store.get_artifacts_by_id(
            [e.artifact_id for e in events])
    }
    for event in events:
      key = event.path.steps[0].key if event.path.steps else ''
      outputs.setdefault(key, []).append(artifacts[event.artifact_id])
    node_id = ctx.name[len(prefix):]
    result[node_id] = NodeExecution(
        node_id=node_id,
        execution_id=newest.id,
        state=_STATE_NAMES.get(newest.last_known_state, 'unknown'),
        outputs=outputs)
  return result


def _slice_value(single) -> str:
  """A TFMA SingleSliceKey's value as text (3.0 as '3')."""
  kind = single.WhichOneof('kind')
  value = getattr(single, kind)
  if isinstance(value, bytes):
    return value.decode('utf-8', errors='replace')
  if isinstance(value, float) and value.is_integer():
    return str(int(value))
  return str(value)


def slice_name(slice_key) -> str:
  """A TFMA SliceKey proto as reports write it: island=Biscoe,sex=MALE."""
  return ','.join(f'{single.column}={_slice_value(single)}'
                  for single in slice_key.single_slice_keys)


def evaluation_slices(evaluation_uri: str
                     ) -> Tuple[Dict[str, Dict[str, float]], Tuple[str, ...]]:
  """The candidate's metrics per slice, and the failed per-slice checks.

  Returns:
    ({slice name: {TFMA metric name: value}}, one line per per-slice
    threshold TFMA found failed, e.g. 'island=Dream: slice_gate_accuracy
    0.7143').
  """
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  slices = {}
  for metrics in tfma.load_metrics(evaluation_uri):
    if not metrics.slice_key.single_slice_keys:
      continue
    found = slices.setdefault(slice_name(metrics.slice_key), {})
    for entry in metrics.metric_keys_and_values:
      key = entry.key
      if (key.is_diff or key.model_name not in ('', 'candidate') or
          key.sub_key.ByteSize()):
        continue
      if entry.value.HasField('double_value'):
        found[key.name] = entry.value.double_value.value
  failures = []
  try:
    result = tfma.load_validation_result(evaluation_uri)
  except Exception:  # pylint: disable=broad-except
    result = None  # No validation ran (no thresholds): nothing failed.
  for per_slice in (result.metric_validations_per_slice if result else ()):
    if not per_slice.slice_key.single_slice_keys:
      continue
    for failure in per_slice.failures:
      what = failure.metric_key.name + (
          ' change' if failure.metric_key.is_diff else '')
      failures.append(f'{slice_name(per_slice.slice_key)}: {what} '
                      f'{failure.metric_value.double_value.value:.4f}')
  return slices, tuple(failures)


def evaluation_metrics(evaluation_uri: str) -> Dict[str, float]:
  """The candidate's overall metrics (by TFMA name) from TFMA's output."""
  return evaluation_results.metrics_by_slice(evaluation_uri).get(
      evaluation_results.OVERALL, {})


def summarize(metadata_path: str, pipeline_name: str,
              since_ms: int = 0) -> RunSummary:
  """Summarises the newest run of the pipeline (see RunSummary)."""
  store = open_store(metadata_path)
  executions = node_executions(store, pipeline_name, since_ms)
  accuracy = example_count = blessed = evaluation_uri = None
  found = {}
  slices, slice_failures = {}, ()
  evaluator = executions.get('Evaluator')
  if evaluator:
    blessing = evaluator.outputs.get('blessing', [])
    if blessing:
      blessed = bool(_custom_int(blessing[0], 'blessed'))
    evaluation = evaluator.outputs.get('evaluation', [])
    if evaluation:
      evaluation_uri = evaluation[0].uri
      found = evaluation_metrics(evaluation_uri)
      slices, slice_failures = evaluation_slices(evaluation_uri)
      accuracy = found.get('sparse_categorical_accuracy')
      if 'example_count' in found:
        example_count = int(found['example_count'])
  pushed, pushed_path, reused = False, None, False
  serving_graph = {}
  pusher = executions.get('Pusher')
  if pusher and pusher.outputs.get('pushed_model'):
    pushed_model = pusher.outputs['pushed_model'][0]
    pushed = bool(_custom_int(pushed_model, 'pushed'))
    if pushed:
      pushed_path = _custom_str(pushed_model, 'pushed_destination')
      reused = bool(_custom_int(pushed_model, 'reused_existing_version'))
      properties = pushed_model.custom_properties
      if 'serving_graph_ops' in properties:
        serving_graph['ops'] = properties['serving_graph_ops'].int_value
        for key, value in properties.items():
          if key.startswith('serving_call_ms_batch'):  # Each batch timed.
            serving_graph[key[len('serving_'):]] = value.double_value
  infra_blessed, infra_reason, infra = _infra_validation(executions)
  baselines, gate = _baselines_and_gate(executions)
  model_card_dir = None
  card = executions.get(MODEL_CARD_NODE)
  if card and card.outputs.get(card_spec.MODEL_CARD_KEY):
    model_card_dir = _custom_str(card.outputs[card_spec.MODEL_CARD_KEY][0],
                                 card_spec.CARD_PATH_PROPERTY) or None
  return RunSummary(
      executions=executions,
      accuracy=accuracy,
      example_count=example_count,
      blessed=blessed,
      pushed=pushed,
      pushed_path=pushed_path,
      reused_version=reused,
      evaluation_uri=evaluation_uri,
      metrics=found,
      serving_graph=serving_graph,
      infra_blessed=infra_blessed,
      infra_reason=infra_reason,
      infra=infra,
      slices=slices,
      slice_failures=slice_failures,
      model_card_dir=model_card_dir,
      baselines=baselines,
      gate=gate)


def _baselines_and_gate(executions: Dict[str, NodeExecution]):
  """(the baselines document, the gate) of the run, each None if absent.

  The Evaluator's blessing carries both (the baselines it judged by); a run
  that stopped before the Evaluator has the Baselines artifact's alone.
  """
  evaluator = executions.get('Evaluator')
  blessing = (evaluator.outputs.get('blessing') or [None])[0] if (
      evaluator) else None
  recorded = baselines_report.loads(
      _custom_str(blessing, gate_spec.GATE_PROPERTY) if blessing else None)
  if recorded:
    return recorded['baselines'], recorded['gate']
  node = executions.get(BASELINES_NODE)
  found = (node.outputs.get(baselines_spec.BASELINES_KEY) or [None])[0] if (
      node) else None
  return (baselines_report.loads(
      _custom_str(found, baselines_spec.FIGURES_PROPERTY) if found else None),
          None)


def _infra_validation(executions: Dict[str, NodeExecution]):
  """(blessed or None, reason or None, figures) of the InfraValidator."""
  node = executions.get(INFRA_VALIDATOR_NODE)
  if not node or not node.outputs.get(infra_spec.BLESSING_KEY):
    return None, None, {}
  blessing = node.outputs[infra_spec.BLESSING_KEY][0]
  return (bool(_custom_int(blessing, infra_spec.BLESSED_PROPERTY)),
          _custom_str(blessing, infra_spec.REASON_PROPERTY),
          infra_spec.recorded_figures(blessing))
