"""Generated hostile CSV spans through the whole pipeline and the server.

For each span Hypothesis draws (tests/data/test_generated_spans.py's
strategy, with enough rows for both splits): either `leantfx run` exits 2
with a message and runs nothing, or it pushes a model that used every row
(the run record's counts) and answers a REST request in the columns' names
as written. Two derandomized examples, no shrinking: each is a pipeline run.
"""
import csv
import io
import json
import os

import hypothesis
import pytest

from leantfx import serving_client as client_lib
from leantfx.serving import model_config
from leantfx.serving import server as server_lib
from leantfx.serving import server_config
from tests.data import test_generated_spans
from tests.helpers import run_cli


@pytest.mark.e2e
@hypothesis.settings(
    max_examples=2, deadline=None, derandomize=True, database=None,
    phases=(hypothesis.Phase.explicit, hypothesis.Phase.generate),
    suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(span=test_generated_spans.spans_(rows_per_file=(30, 45)))
def test_a_generated_span_is_refused_or_served_in_its_own_names(
    tmp_path_factory, span):
  files, label, total = span
  tmp = tmp_path_factory.mktemp('generated')
  root = str(tmp / 'data')
  test_generated_spans.write_span(root, files)
  output = str(tmp / 'out')
  record = str(tmp / 'record.json')
  result = run_cli(['run', '--data-root', root, '--label', label,
                    '--name', 'generated', '--output', output,
                    '--run-record', record, '--train-steps', '60',
                    '--min-accuracy', '0', '--min-r2=-1e9',
                    '--baseline-margin', 'off', '--no-drift-check'])
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  if result.returncode == 2:
    hypothesis.event('refused before anything ran')
    assert result.stderr.strip()
    assert not os.path.exists(os.path.join(output, 'tfx'))
    return
  hypothesis.event('pushed')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  with open(record) as f:
    facts = json.load(f)
  assert facts['rows'] == {'checked': total, 'read': total, 'used': total}
  config = server_config.ServerConfig(
      rest_port=0, grpc_port=0, file_system_poll_wait_seconds=-1,
      max_num_load_retries=0, request_timeout_s=60.0)
  server = server_lib.ModelServer(
      model_config.models_from_base_path(os.path.join(output, 'serving')),
      config).start()
  try:
    rest = client_lib.RestClient('127.0.0.1', server.rest_port,
                                 timeout_s=60.0)
    inputs = rest.metadata('generated')['metadata']['signature_def'][
        'signature_def']['serving_default']['inputs']
    rows = [row for text in files.values()
            for row in list(csv.reader(io.StringIO(text, newline='')))[1:]]
    header = list(csv.reader(io.StringIO(next(iter(files.values())),
                                         newline='')))[0]
    # The request names every column as written; the signature says which
    # take text and which numbers (a missing number is sent as 0).
    assert set(inputs) == set(header) - {label}
    instance = {}
    for name, value in zip(header, rows[0]):
      if name in inputs:
        instance[name] = (value if inputs[name]['dtype'] == 'DT_STRING' else
                          float(value or 0))
    answer = rest.predict('generated', instances=[instance])
  finally:
    server.stop(grace_s=5.0)
  prediction = answer['predictions'][0]
  if facts['task'] == 'regression':
    assert isinstance(prediction['predictions'], float)
  else:
    assert prediction['classes'] in {row[header.index(label)] for row in rows}
