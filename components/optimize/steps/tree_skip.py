"""A tree model: nothing the optimizer can build, and the reason, reported.

When the Trainer exported gradient-boosted trees (models/model_family.py),
the pushed SavedModel runs TensorFlow Decision Forests' ops: pruning,
quantization-aware training, clustering, distillation and low-rank work on
Keras layers the trees do not have, and the TFLite, ONNX and OpenVINO
converters know no TF-DF op. The executor then skips the flow: ``reason``
says why, ``write_report`` writes variants.json (no variants, nothing
selected, the reason under 'skipped') with a Markdown and HTML report of
that one paragraph. The run is no failure: the InfraValidator and the
Pusher serve and push the SavedModel as they do any other.
"""
import datetime
import html
import json
import os
from typing import Dict, Optional

from leantfx import decision_forests
from leantfx.components.optimize.evaluation import report

SKIPPED_KEY = 'skipped'


def reason(serving_model_dir: str) -> Optional[str]:
  """Why the model cannot be optimized (None: it can, a network).

  Args:
    serving_model_dir: the Trainer's Format-Serving SavedModel.
  """
  ops = decision_forests.op_names(serving_model_dir)
  if not ops:
    return None
  return ('the Trainer pushed gradient-boosted trees (TF Decision Forests '
          f'ops {", ".join(sorted(ops))}): the techniques optimize Keras '
          'layers, and TFLite, ONNX and OpenVINO cannot run TF-DF\'s ops; '
          'the SavedModel is served and pushed as it is (pass '
          '--model-family network for an optimizable model)')


def write_report(report_dir: str, why: str,
                 source_model_uri: str) -> Dict[str, str]:
  """Writes the skip's variants.json, report.md and report.html.

  Args:
    report_dir: the report folder (created if missing; local).
    why: ``reason``'s text.
    source_model_uri: the Trainer's Model artifact.

  Returns:
    {'variants', 'markdown', 'html'}: the paths written.
  """
  os.makedirs(report_dir, exist_ok=True)
  record = {
      'title': 'Model optimization report',
      'created_at': datetime.datetime.now(
          datetime.timezone.utc).isoformat(timespec='seconds'),
      'source_model_uri': source_model_uri,
      SKIPPED_KEY: why,
      'decisions': [],
      'selected': None,
      'pushed_to': None,
      'runtime_picks': {},
  }
  paths = {'variants': os.path.join(report_dir, report.VARIANTS_FILE),
           'markdown': os.path.join(report_dir, report.REPORT_MD),
           'html': os.path.join(report_dir, report.REPORT_HTML)}
  with open(paths['variants'], 'w', encoding='utf-8') as f:
    json.dump(record, f, indent=2)
  text = f'Skipped: {why}.'
  with open(paths['markdown'], 'w', encoding='utf-8') as f:
    f.write(f"# {record['title']}\n\nModel: {source_model_uri}\n\n{text}\n")
  with open(paths['html'], 'w', encoding='utf-8') as f:
    f.write(f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>"
            f"{record['title']}</title></head><body><h1>{record['title']}</h1>"
            f"<p>Model: {html.escape(source_model_uri)}</p>"
            f"<p>{html.escape(text)}</p></body></html>\n")
  return paths
