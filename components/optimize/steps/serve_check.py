"""Serve check: every pick served by ``leantfx serve`` before it is pushed.

The picks are laid out exactly as their push lays them out (the same push
functions, into a scratch push base: model file(s), feature_names.json,
manifest.json), and one ``leantfx serve`` serves them all, one model per
runtime (leantfx/infra_check.py). Each is queried with the first raw eval
rows, under the names the columns were written with, and must answer what
the pick answers offline in its runtime (its runtime's predictor: the
same file, so the float bound of 1e-4 holds for the int8 picks too: both
sides dequantize the same int8 outputs with the same scale). A pick that
does not load, answers otherwise or times out is not pushed and its
failure is listed; the figures of one that passed go into its manifest.

A pick pushed taking the transformed features (its raw-column export
failed) is not served here: its requests would be the Transform's outputs,
which no client sends; the report says so.
"""
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Tuple

from absl import logging
import numpy as np

from leantfx import infra_check
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.export import raw_features
from leantfx.components.optimize.export import raw_runtimes
from leantfx.components.optimize.steps import push_picks
from leantfx.runtimes import push
from leantfx.runtimes import registry as runtimes_lib

STAGE = 'infra validation'
NOT_SERVED = ('not served before the push: it takes the transformed '
              'features')


def _offline(runtime: str, model_file: str,
             rows: Mapping[str, np.ndarray]) -> Tuple[str, np.ndarray]:
  """(score output name, its offline value) of a raw export on rows."""
  predictor = raw_runtimes.raw_predictor(runtime, model_file, num_threads=1)
  return predictor.output_name, np.asarray(predictor.predict(rows))


def _stage(runtime: str, path: str, scratch: str,
           feature_names_file: Optional[str]) -> str:
  """The pick's version folder as its push writes it; returns the folder."""
  common = dict(source_model_uri='', technique_chain=[], metrics={},
                feature_names_file=feature_names_file)
  if runtime == runtimes_lib.TFLITE:
    return push.push_tflite(path, scratch, runtime, tflite_mode='',
                            **common).directory
  return push.push_runtime_model(runtime, path, scratch, runtime, mode='',
                                 **common).directory


def check_picks(picks: Mapping[str, measure.VariantMetrics],
                exports: push_picks.Exports,
                raw: Optional[raw_features.RawInputs],
                names: Mapping[str, str],
                source_model_uri: str,
                failures: List[Dict[str, str]],
                settings: infra_check.Settings = infra_check.Settings()
               ) -> Dict[str, Dict[str, Any]]:
  """Serves the raw-column picks in one ``leantfx serve``; checks each.

  Args:
    picks: runtime -> its pick.
    exports: raw_fold.fold_raw_columns's answer.
    raw: the raw rows (None: no pick takes raw columns, nothing is served).
    names: {feature key: name as written} of the renamed columns.
    source_model_uri: the trained model (its feature_names.json is pushed
      beside each raw export).
    failures: a pick that fails is appended here ('stage': STAGE).
    settings: the check's bounds.

  Returns:
    runtime -> {'passed', 'reason', 'figures'} for every pick (a
    transformed-input one: passed, with the reason it was not served).
    The caller pushes only the picks that passed.
  """
  served: Dict[str, Dict[str, Any]] = {}
  to_check = {}
  for runtime, variant in picks.items():
    path, _ = exports[runtime]
    if path is None or raw is None:
      served[runtime] = {'passed': True, 'reason': NOT_SERVED, 'figures': {}}
      continue
    to_check[runtime] = (variant, path)
  if not to_check:
    return served
  count = min(len(raw.eval), settings.max_rows)
  rows = {k: np.asarray(v)[:count] for k, v in raw.eval.features.items()}
  request_rows = {names.get(k, k): v for k, v in rows.items()}
  feature_names_file = push_picks.feature_names_file(source_model_uri)
  with tempfile.TemporaryDirectory(prefix='leantfx-serve-check-') as scratch:
    candidates = []
    for runtime, (variant, path) in to_check.items():
      spec = runtimes_lib.get(runtime)
      try:
        folder = _stage(runtime, path, scratch, feature_names_file)
        output, expected = _offline(runtime, spec.model_path(folder), rows)
      except Exception as e:  # pylint: disable=broad-except
        served[runtime] = {'passed': False, 'figures': {},
                           'reason': f'{type(e).__name__}: {e}'}
        continue
      candidates.append(infra_check.Candidate(runtime, folder, request_rows,
                                              {output: expected}))
    results = infra_check.check(candidates, settings) if candidates else {}
  for runtime, result in results.items():
    served[runtime] = {'passed': result.passed, 'reason': result.reason,
                       'figures': dict(result.figures)}
  for runtime, outcome in served.items():
    if outcome['passed']:
      continue
    name = picks[runtime].name
    logging.error('ModelOptimizer: %s (%s) failed in leantfx serve; not '
                  'pushed: %s', name, runtime, outcome['reason'])
    failures.append({'candidate': name, 'stage': STAGE,
                     'error': outcome['reason'],
                     'not_pushed': runtime})
  return served
