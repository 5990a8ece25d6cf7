"""The pipeline option set: one definition for ``run``, ``compile`` and ``watch``.

Every option that shapes the pipeline (data, validation, augmentation,
training, the Evaluator's gate, model optimization, retraining, Beam) is added
here once, with one argument type and one help text, so the three commands
accept the same options with the same checks and the same messages.
``build.build_pipeline_config`` turns the parsed options into the
PipelineConfig; ``pipeline_argv`` turns them back into ``leantfx run``
arguments, which is how ``leantfx watch`` passes them through.

Runner facts are not here: ``run`` adds --output and --runner, ``compile``
adds the cluster paths, image, resources and retries.
"""
import argparse
from typing import Any, Dict, List, Sequence

from leantfx import config as config_lib
from leantfx import datasets
from leantfx import sizing
from leantfx import slicing
from leantfx import task as task_lib
from leantfx.cli import argtypes
from leantfx.runtimes import registry as runtimes
from leantfx.pipeline import beam_presets

# The attribute the parser keeps the pipeline options' destinations in.
_DESTS_ATTR = '_leantfx_pipeline_dests'
# components.optimize.evaluation.selection.POLICIES, spelled out so that parsing options
# (and --help) does not import TensorFlow; tests/optimize/test_selection.py
# checks the two match.
POLICIES = ('smallest', 'smallest_download', 'fastest', 'most_accurate')
# components.optimize.config.candidate_names() without the baseline, spelled
# out for the same reason; tests/optimize/test_config.py checks the two match.
TECHNIQUES = ('pruning', 'pruning+pqat', 'qat', 'clustering', 'distillation',
              'low_rank')
DEFAULT_IMAGE_SHAPE = '32x32x3'
# Image datasets are augmented by default (the digits run uses it): one
# augmented copy per train image. Digits accuracy with and without it is in
# docs/data.md.
DEFAULT_IMAGE_COPIES = 1


class _Recorder:
  """Adds arguments to a parser or group and records their destinations."""

  def __init__(self, parser: argparse.ArgumentParser):
    self.parser = parser
    self.dests: List[str] = []

  def group(self, title: str, description: str = None) -> '_Group':
    return _Group(self, self.parser.add_argument_group(title, description))


class _Group:

  def __init__(self, recorder: _Recorder, group):
    self._recorder = recorder
    self._group = group

  def add(self, *flags, **kwargs):
    action = self._group.add_argument(*flags, **kwargs)
    self._recorder.dests.append(action.dest)
    return action


COMMANDS = ('run', 'compile', 'watch')


def add_pipeline_options(parser: argparse.ArgumentParser,
                         command: str = 'run') -> None:
  """Adds the pipeline option set to a command's parser.

  Args:
    parser: the subcommand's parser.
    command: 'run'; 'compile', where --data-root is the cluster's data root
      (the data_root parameter's default) and --sample-data names a local
      copy that fixes the columns, classes and schema compiled in; or
      'watch', which has its own --data-root (the folder it watches) and
      pins each run's --span itself.
  """
  assert command in COMMANDS, command
  for_cluster = command == 'compile'
  pin_span = command != 'watch'
  rec = _Recorder(parser)
  data = rec.group('data')
  data.add('--dataset', choices=sorted(datasets.BUNDLED),
           help='a bundled dataset (its schema and model are used)')
  if for_cluster:
    # Not a pipeline option of its own: the cluster path is a runner fact
    # that compile adds; the local copy stands in for it while building.
    parser.add_argument(
        '--data-root', required=True,
        help='the data root as the cluster reads it (gs://, s3://, or a '
        'mounted path): the default of the data_root parameter')
    data.add('--sample-data', metavar='DIR',
             help='a local copy of your data (span-<N>/...) that fixes the '
             'columns, classes and schema compiled in (default for '
             '--dataset: the bundled data)')
  elif command == 'run':
    data.add('--data-root', help='folder of span-<N>/ folders (CSV, '
             'TFRecord or images; default for --dataset: OUTPUT/data/NAME, '
             'prepared)')
  data.add('--label', help='label column of your own data')
  data.add('--task', choices=task_lib.TASK_OPTIONS, default='auto',
           help='what the label is: auto (default: decided from the label '
           'column and printed: text or few distinct integers -> '
           'classification; floats or many distinct integers -> regression), '
           'classification or regression')
  data.add('--categorical', action='append', default=[], metavar='COLUMN',
           help='treat COLUMN as categorical even if its values look '
           'numeric (repeatable; the same as --column-role COLUMN='
           'categorical)')
  data.add('--column-role', action='append', default=[],
           metavar='COLUMN=ROLE',
           help='give a CSV column its role instead of the inferred one '
           '(repeatable): numeric, categorical, boolean, date, text or '
           'identifier (left out of the features). The run prints every '
           "column's role and why")
  data.add('--date-format', action='append', default=[],
           metavar='[COLUMN=]FORMAT',
           help='the strptime format of date columns (or of one column), '
           'instead of the one found: %%Y-%%m-%%d, %%Y-%%m-%%dT%%H:%%M:%%S%%z, '
           '%%Y-%%m-%%dT%%H:%%M:%%S, %%Y-%%m-%%d %%H:%%M:%%S, %%Y/%%m/%%d, '
           '%%d/%%m/%%Y, %%m/%%d/%%Y, %%d.%%m.%%Y (repeatable)')
  data.add('--normalize-labels', action='store_true',
           help='strip white space around CSV labels ("barolo " is "barolo");'
           ' without it such labels are refused before anything runs. '
           'Labels are otherwise kept exactly as written ("+1", "01")')
  data.add('--schema', help='a curated schema.pbtxt to validate against '
           '(default: the bundled one, else inferred)')
  data.add('--name', help='model name for your own data (default: the data '
           'root folder name)')

  fmt = rec.group('data format and validation')
  fmt.add('--format', choices=config_lib.DATA_FORMATS, dest='data_format',
          help='csv (span-N/*.csv), tfrecord (span-N/* files of tf.Examples, '
          '.gz for gzip) or images (span-N/<class>/*.png|jpg); inferred from '
          'the newest span when unambiguous')
  fmt.add('--image-shape', default=None, metavar='HxWxC',
          help='images of your own data are resized to this (channels 1 or '
          f'3; default {DEFAULT_IMAGE_SHAPE})')
  fmt.add('--bad-images', choices=config_lib.BAD_IMAGE_POLICIES,
          default='fail', help='a corrupt image or one of the wrong channel '
          'count stops the run (fail, default) or is left out (skip); '
          'counted either way')
  fmt.add('--allow-anomalies', action='append', default=[],
          metavar='KIND,...', help='anomaly kinds the validation gate reports '
          'without stopping the run (e.g. ENUM_TYPE_UNEXPECTED_STRING_VALUES);'
          ' recorded in ML Metadata')
  fmt.add('--no-drift-check', action='store_true',
          help='do not compare the span with the previous one')
  fmt.add('--skip-disk-check', action='store_true',
          help='run even when the output folder\'s filesystem has less free '
          'space than twice the artifacts estimated from the input (the '
          'estimate is printed either way; compile cannot see the '
          'cluster\'s storage and never checks)')
  fmt.add('--min-rows-per-class', type=argtypes.positive_int, metavar='N',
          help='drop the rows of every class with fewer than N rows in the '
          'span (CSV data), instead of refusing a class too rare for the '
          '4:1 train/eval split (5 rows: 4 to train on, 1 to evaluate); the '
          'plan and the summary name the classes and count their rows as '
          'dropped (default: no row is dropped)')
  fmt.add('--noisy-rows', choices=config_lib.NOISY_ROW_POLICIES,
          help='rows with missing or out-of-domain values: impute (default) '
          'or drop them from the train split; counted either way')

  aug = rec.group('augmentation and rebalancing')
  defaults = config_lib.AugmentConfig()
  aug.add('--augment', action=argparse.BooleanOptionalAction, default=None,
          help='augmented copies of train images (default: on for image '
          'datasets, e.g. digits)')
  aug.add('--augment-copies', type=argtypes.non_negative_int, default=None,
          metavar='N', help='augmented copies per train image (default '
          f'{DEFAULT_IMAGE_COPIES})')
  aug.add('--rotation', type=argtypes.non_negative_float,
          default=defaults.rotation_degrees, metavar='DEGREES')
  for flag, default in (('--shift', defaults.shift_fraction),
                        ('--zoom', defaults.zoom_fraction),
                        ('--brightness', defaults.brightness),
                        ('--contrast', defaults.contrast)):
    aug.add(flag, type=argtypes.fraction_below_one, default=default,
            metavar='FRACTION')
  aug.add('--noise', type=argtypes.non_negative_float,
          default=defaults.noise_stddev, metavar='STDDEV')
  aug.add('--flip-horizontal', action='store_true',
          help='random left-right flips (off: a flipped 2 is no 2)')
  aug.add('--flip-vertical', action='store_true')
  aug.add('--oversample', choices=config_lib.OVERSAMPLING_METHODS,
          default='none', help='add minority-class rows to the train split: '
          'random duplicates or SMOTE-style interpolation')
  aug.add('--oversample-ratio', type=float, default=defaults.target_ratio,
          metavar='RATIO', help='raise each class to this share of the '
          'largest')
  aug.add('--smote-neighbors', type=argtypes.whole_number,
          default=defaults.smote_neighbors, metavar='K')
  aug.add('--jitter', type=argtypes.non_negative_float,
          default=defaults.jitter_stddev, metavar='STDDEV',
          help='Gaussian jitter on numeric features of oversampled rows, in '
          'class standard deviations')
  aug.add('--class-weights', choices=config_lib.CLASS_WEIGHT_MODES,
          default='none', help='auto: weigh the loss by inverse class '
          'frequency of the train split (an alternative to oversampling)')

  _add_training(rec.group('training'))

  gate = rec.group('evaluation gate')
  evaluation = config_lib.EvaluationConfig()
  gate.add('--min-accuracy', type=argtypes.fraction,
           default=evaluation.min_accuracy,
           help='bless only at or above this eval accuracy (default: no '
           'absolute bound; the baselines set the bar, --baseline-margin)')
  gate.add('--baseline-margin', type=argtypes.fraction_or_off,
           default=evaluation.baseline_margin, metavar='POINTS|off',
           help='bless only a model that beats the majority class (the '
           'mean) significantly and is at most this far below the strong '
           'baseline measured in the run (accuracy points; regression: the '
           'fraction its RMSE may exceed the baseline\'s; default '
           f'{evaluation.baseline_margin}); off: no relative gate')
  gate.add('--max-accuracy-drop', type=argtypes.fraction,
           default=evaluation.max_accuracy_drop,
           help='how far below the last blessed model a new one may fall')
  gate.add('--min-auc', type=argtypes.fraction, default=evaluation.min_auc,
           help='two-class labels: bless only at or above this eval AUC '
           '(default: AUC, precision and recall are reported, not gated)')
  gate.add('--min-r2', type=float, default=evaluation.min_r2,
           help='regression: bless only at or above this eval R^2 (default '
           f'{evaluation.min_r2}: no worse than predicting the mean)')
  gate.add('--max-rmse', type=argtypes.positive_float,
           default=evaluation.max_rmse,
           help='regression: bless only at or below this eval RMSE (target '
           'units; default: no bound)')
  gate.add('--max-rmse-increase', type=argtypes.non_negative_float,
           default=evaluation.max_rmse_increase, metavar='FRACTION',
           help='regression: how much higher (relative) RMSE may be than the '
           f'last blessed model\'s (default {evaluation.max_rmse_increase})')

  _add_slices(rec.group(
      'slices',
      'Report and gate the model on slices of the eval split: the Evaluator '
      'per slice, and the ModelOptimizer rejects a variant that loses more '
      'than its budget (plus a sampling allowance) on any slice.'))

  opt = rec.group(
      'model optimization (TFLite)',
      'After the Evaluator blesses the model, build optimized TFLite '
      'variants, gate them on the budget and push the selected one.')
  opt.add('--no-optimize', dest='optimize', action='store_false',
          help='skip the ModelOptimizer (no TFLite push)')
  opt.add('--tflite-max-accuracy-drop', type=argtypes.fraction,
          default=0.01, help='largest accuracy drop vs the float model a '
          'variant may have (default 0.01)')
  opt.add('--tflite-max-rmse-increase', type=argtypes.non_negative_float,
          default=0.05, metavar='FRACTION',
          help='regression: how much higher (relative) a variant\'s RMSE '
          'may be than the float model\'s, as --max-rmse-increase means '
          'for the Evaluator (default 0.05)')
  opt.add('--tflite-max-size-bytes', type=argtypes.positive_int,
          help='largest .tflite file a variant may be')
  opt.add('--tflite-max-p99-ms', type=argtypes.positive_float,
          help='largest batch-1 p99 latency (ms, 1 thread)')
  opt.add('--tflite-policy', choices=POLICIES, default='smallest',
          help='which blessed variant to push: smallest = fewest bytes on '
          'disk, smallest_download = fewest gzipped bytes (where pruning '
          'pays off), fastest = lowest p99, most_accurate; chosen on half '
          'the eval split, reported on the other half (default smallest)')
  opt.add('--tflite-latency-runs', type=argtypes.positive_int, default=200,
          help='timed batch-1 runs per variant (default 200)')
  opt.add('--latency-threads', type=argtypes.positive_int, default=1,
          metavar='N',
          help='threads each runtime may use while the optimizer times and '
          'gates the variants: the deploy target\'s thread count (default '
          '1, comparable across machines)')
  opt.add('--target-cpu', choices=tuple(runtimes.TARGET_CPUS),
          help='the CPU the variants will be served on: x86 builds TFLite, '
          'OpenVINO and ONNX variants, arm TFLite and ONNX (OpenVINO\'s int8 '
          'kernels are x86); instead of --runtimes. Latency is still '
          'measured on the machine the optimizer runs on')
  opt.add('--runtimes', type=argtypes.runtime_list, default=runtimes.ALL,
          metavar='LIST',
          help='runtimes to build and push variants in, comma-separated, '
          'of tflite,openvino,onnx, or all (the default: every one '
          'installed where the optimizer runs; pip extra '
          'leantfx[runtimes]). OpenVINO and ONNX variants (float32, int8) '
          'are built for the candidates whose TFLite variants are inside '
          'the accuracy budget and pushed to <output>/openvino and '
          '<output>/onnx; --runtimes tflite builds TFLite alone')
  opt.add('--techniques', type=argtypes.technique_list,
          default=argtypes.ALL_TECHNIQUES, metavar='LIST',
          help='technique candidates to build beside the baseline (the '
          'trained model in every mode, always built: the reference), '
          'comma-separated, of ' + ','.join(TECHNIQUES) + '; all (the '
          'default) or none (the baseline alone: a large model whose '
          'fine-tuning techniques would take longer than its training)')

  card = rec.group(
      'model card',
      'Each push gets a model card (OUTPUT/model_cards/NAME/VERSION/'
      'model_card.{json,md,html}): data, training, evaluation, serving '
      'figures, cost and limitations.')
  card.add('--target-qps', type=argtypes.positive_float, metavar='N',
           help='predictions per second the deployment must serve: the card '
           'gives the cores each pushed model needs for it, from its '
           'measured served throughput (default: not sized)')
  card.add('--core-hour-price', type=argtypes.non_negative_float,
           metavar='PRICE', help='price of one core-hour (needs '
           '--target-qps): the card prices a million predictions and the '
           'run\'s training')

  retrain = rec.group('continuous retraining')
  if pin_span:
    retrain.add('--span', type=argtypes.positive_int, metavar='N',
                help='ingest span N instead of the newest (the watcher pins '
                'each run to the span it saw complete)')
  retrain.add('--span-window', type=argtypes.positive_int, default=1,
              metavar='K', help='train on the newest K spans (default 1: the '
              'newest span only)')
  retrain.add('--warm-start', action='store_true',
              help='start training from the latest blessed model')
  retrain.add('--no-cache', action='store_true',
              help='re-run every component (compile: caching off for every '
              'task)')
  serve = rec.group('serving and scoring')
  serve.add('--bulk-score', action='store_true',
            help="after the push, score the run's span with the newest "
            'pushed version, as `leantfx score` does (predictions CSV, '
            'PredictionLogs, rows in == rows out): into OUTPUT/bulk_scores/'
            'span-N/version-V/ (compile: a BulkScore task after the Pusher, '
            'below the pipeline root)')
  serve.add('--serve-args', default='', metavar='"OPTIONS"',
            help='the `leantfx serve` options your deployment runs with, '
            "after an = sign (--serve-args='--workers 2 --batching off'): "
            "the InfraValidator and the ModelOptimizer's serve check serve "
            'every candidate with them before a push (ports, host and model '
            "paths are the check's own)")

  _add_beam_group(rec, 'beam (the data components: ExampleGen, statistics, '
                  'Augment, Transform, Evaluator)')
  existing = getattr(parser, _DESTS_ATTR, [])
  setattr(parser, _DESTS_ATTR, existing + rec.dests)


def _add_beam_group(rec: _Recorder, title: str) -> None:
  """The Beam runner options: one definition for every command on Beam."""
  beam = rec.group(title)
  beam.add('--beam-runner', choices=beam_presets.RUNNERS, default='direct',
           help='direct (default: the DirectRunner in this process), '
           "portable (Beam's portability framework: Job API + Fn API), "
           'flink or spark (portable, submitted to their Beam job server), '
           'dataflow; see docs/beam.md')
  beam.add('--beam-mode', choices=(sizing.AUTO,) + beam_presets.DIRECT_MODES,
           default=sizing.AUTO, help='DirectRunner running mode. auto '
           '(default): in_memory for a span below '
           f'{sizing.MULTI_PROCESSING_MIN_ROWS:,} rows, else '
           'multi_processing with one worker per core (the run says which '
           'and why); compile sizes each task instead (--span-rows)')
  beam.add('--beam-workers', type=argtypes.positive_int,
           help='DirectRunner workers (default: 1, or every core when '
           '--beam-mode auto chooses multi_processing); SDK workers per '
           'environment for portable, flink and spark '
           '(--sdk_worker_parallelism, default 1)')
  beam.add('--job-endpoint', type=argtypes.job_endpoint,
           metavar='HOST:PORT|embed',
           help='portable runners: where the pipelines are submitted. embed: '
           "Beam's job service in this process (one SDK worker); HOST:PORT: "
           'a job server (`leantfx beam job-server`, or a Flink/Spark job '
           'server)')
  beam.add('--environment', type=argtypes.beam_environment,
           metavar='ENVIRONMENT',
           help='portable runners: where the SDK workers run: loopback, '
           'external:HOST:PORT, process[:COMMAND] or docker:IMAGE. loopback: in '
           'this process (default for portable); external:HOST:PORT: a '
           'worker pool (`leantfx beam worker-pool`; default for flink and '
           f'spark: {beam_presets.CLUSTER_ENVIRONMENT}, the task managers\' '
           'sidecar); process: the runner runs COMMAND; docker: IMAGE')
  beam.add('--beam-arg', action='append', default=[], metavar='ARG',
           help='extra Beam pipeline argument, passed through (repeatable), '
           'e.g. --beam-arg=--environment_cache_millis=10000')


def add_beam_options(parser: argparse.ArgumentParser, title: str) -> None:
  """The Beam runner options alone, for a command that runs its own Beam
  pipeline (``leantfx score``); ``cli/build.py`` ``beam_args`` reads them."""
  _add_beam_group(_Recorder(parser), title)


def _add_training(group: _Group) -> None:
  """The training flags: budget, precision, distribution, memory, tuner."""
  defaults = config_lib.TrainingConfig()
  group.add('--train-steps', type=argtypes.positive_int,
            help='exactly this many optimizer steps (default: the passes '
            'rule of --train-passes, --min-train-steps, --max-train-steps)')
  group.add('--train-passes', type=argtypes.positive_float, metavar='P',
            help='train for P passes over the train split (default '
            f'{config_lib.DEFAULT_TRAIN_PASSES:g}): steps = P x train rows / '
            'global batch, the rows counted when the Trainer runs, kept '
            'between --min-train-steps and --max-train-steps')
  group.add('--min-train-steps', type=argtypes.positive_int, metavar='N',
            help='the fewest steps of the passes rule: small data trains '
            'this many steps however few its rows (default: 1000 for the '
            f'bundled datasets, else {defaults.train_steps})')
  group.add('--max-train-steps', type=argtypes.positive_int, metavar='N',
            help='the most steps of the passes rule (default '
            f'{config_lib.DEFAULT_MAX_TRAIN_STEPS:,}); the Trainer\'s '
            'train_args, a pipeline parameter on Kubeflow')
  group.add('--epochs', type=argtypes.positive_int)
  group.add('--batch-size', type=argtypes.positive_int)
  group.add('--learning-rate', type=argtypes.positive_float)
  group.add('--seed', type=argtypes.whole_number)
  group.add(
      '--precision', choices=config_lib.PRECISIONS, default=defaults.precision,
      help='auto (default): mixed_float16 on GPUs with compute capability '
      '>= 7.0, mixed_bfloat16 on TPUs, on CPUs with bf16 units the faster of '
      'float32 and mixed_bfloat16 in a short probe (cached)')
  group.add(
      '--strategy', choices=config_lib.STRATEGIES, default=defaults.strategy,
      help='tf.distribute strategy (auto: multi_worker when TF_CONFIG names a '
      'cluster, mirrored on 2+ GPUs, else one device)')
  group.add('--global-batch-size', type=argtypes.whole_number, metavar='N',
            help='fixed global batch split over the replicas (default: '
            '--batch-size per replica)')
  group.add('--accumulation-steps', type=argtypes.whole_number, metavar='N',
            default=defaults.accumulation_steps,
            help='micro-batches per optimizer step (gradient accumulation; '
            'default 1)')
  group.add('--recompute', action='store_true',
            help='activation checkpointing: recompute block activations in '
            'the backward pass (mlp, cnn)')
  group.add('--architecture', choices=config_lib.ARCHITECTURES,
            default=defaults.architecture,
            help="model architecture (auto: the dataset's mlp/cnn)")
  group.add('--width-multiplier', type=float,
            default=defaults.width_multiplier,
            help='scales units/filters (MobileNetV2 alpha)')
  group.add('--depth-multiplier', type=float,
            default=defaults.depth_multiplier,
            help='scales layers per stage (rounded up)')
  group.add('--image-size', type=argtypes.whole_number,
            default=defaults.image_size,
            help='resize images to this side for mobilenet_v2 and '
            'efficientnet_b0 (0: own size, at least 32)')
  group.add('--dropout', type=float, default=defaults.dropout)
  group.add('--l2', type=float, default=defaults.l2,
            help='L2 penalty on kernels (default 0: off)')
  group.add('--early-stopping-patience', type=argtypes.whole_number,
            default=defaults.early_stopping_patience, metavar='EPOCHS',
            help='stop after this many epochs without a lower validation '
            'loss, keeping the best weights (0: off)')
  group.add('--warmup-steps', type=argtypes.whole_number,
            default=defaults.warmup_steps,
            help='linear learning-rate warm-up steps (default 0)')
  group.add('--lr-decay', choices=config_lib.LR_DECAYS,
            default=defaults.lr_decay,
            help='after warm-up: constant, linear, cosine; auto (default): '
            'cosine for free-text data (the bag_of_ngrams family), '
            'else constant')
  group.add('--regression-loss', choices=config_lib.REGRESSION_LOSSES,
            default=defaults.regression_loss,
            help='regression: mse (default) or huber (less pulled by '
            'outliers; delta = one standard deviation of the target)')
  group.add('--model-family', choices=config_lib.MODEL_FAMILIES,
            default=defaults.model_family,
            help='auto (default): on tabular data, train gradient-boosted '
            'trees (TF Decision Forests) beside the network and push the '
            'better on the eval split (trees only past a margin: the '
            'network keeps TFLite, ONNX, OpenVINO and the optimizer); '
            'network: no trees; trees: push the trees')
  group.add('--tune', type=argtypes.trials_or_auto, metavar='TRIALS|auto',
            help='run the TFX Tuner with this trial budget first; the '
            'Trainer uses its best hyperparameters. auto: the Tuner first '
            'trains the untuned network for --tuner-steps and searches '
            f'({config_lib.AUTO_TUNER_TRIALS} trials) only when that trails '
            "the run's strong baseline by more than --baseline-margin, "
            'keeping the untuned values otherwise or when no trial beats '
            'them; the summary says which and why')
  group.add('--tuner', choices=config_lib.TUNER_ALGORITHMS,
            default=defaults.tuner_algorithm,
            help='search algorithm (default random)')
  group.add('--tuner-steps', type=argtypes.whole_number,
            default=defaults.tuner_steps, help='training steps per trial')
  group.add('--tuner-epochs', type=argtypes.whole_number,
            default=defaults.tuner_epochs,
            help="epochs per trial (Hyperband's max_epochs)")


def _add_slices(group: _Group) -> None:
  """The slicing flags: which slices, and the Evaluator's per-slice gate."""
  evaluation = config_lib.EvaluationConfig()
  group.add('--slice-by', action='append', default=[], metavar='COLUMN',
            help='report and gate every value of COLUMN, as written in the '
            'data (repeatable; COLUMN,COLUMN: every pair of values, a '
            'cross). A numeric column may hold at most '
            f'{slicing.MAX_NUMERIC_SLICE_VALUES} distinct values')
  group.add('--min-slice-size', type=argtypes.positive_int,
            default=evaluation.min_slice_size, metavar='N',
            help='a slice of fewer eval examples is reported, not gated '
            f'(default {evaluation.min_slice_size})')
  group.add('--min-slice-accuracy', type=argtypes.fraction,
            default=evaluation.min_slice_accuracy,
            help='bless only when every slice\'s eval accuracy is at or '
            'above this (default: not bounded)')
  group.add('--max-slice-accuracy-drop', type=argtypes.fraction,
            default=evaluation.max_slice_accuracy_drop,
            help='how far below the last blessed model\'s a slice\'s '
            f'accuracy may fall (default {evaluation.max_slice_accuracy_drop})')
  group.add('--max-slice-rmse-increase', type=argtypes.non_negative_float,
            default=evaluation.max_slice_rmse_increase, metavar='FRACTION',
            help='regression: how much higher (relative) a slice\'s RMSE '
            'may be than the last blessed model\'s (default '
            f'{evaluation.max_slice_rmse_increase})')


def pipeline_defaults() -> Dict[str, Any]:
  """Every pipeline option's default, by destination (as ``run`` has them)."""
  parser = argparse.ArgumentParser(add_help=False)
  add_pipeline_options(parser, 'run')
  return {action.dest: action.default for action in parser._actions}  # pylint: disable=protected-access


def pipeline_dests(parser: argparse.ArgumentParser) -> List[str]:
  """The destinations of the pipeline options a parser holds."""
  return list(getattr(parser, _DESTS_ATTR, []))


def given_options(parser: argparse.ArgumentParser,
                  args: argparse.Namespace) -> List[str]:
  """The pipeline options set to something other than their default."""
  return [
      action.option_strings[0] for action in parser._actions  # pylint: disable=protected-access
      if action.dest in pipeline_dests(parser) and action.option_strings and
      getattr(args, action.dest, action.default) != action.default
  ]


def pipeline_argv(parser: argparse.ArgumentParser,
                  args: argparse.Namespace,
                  skip: Sequence[str] = ()) -> List[str]:
  """The pipeline options of ``args`` as ``leantfx run`` arguments.

  Only options whose value differs from the default are written, each with
  its first flag, so ``run`` parses them back into the same values.

  Args:
    parser: the parser that parsed args (it knows the option set).
    args: the parsed arguments.
    skip: destinations not to write (e.g. those the caller sets itself).

  Returns:
    A list of arguments for ``leantfx run``.
  """
  argv = []
  dests = set(pipeline_dests(parser)) - set(skip)
  for action in parser._actions:  # pylint: disable=protected-access
    if action.dest not in dests or not action.option_strings:
      continue
    value = getattr(args, action.dest, action.default)
    if value == action.default:
      continue
    flag = action.option_strings[0]
    if isinstance(action, argparse.BooleanOptionalAction):
      argv.append(flag if value else f'--no-{flag[2:]}')
    elif isinstance(action, (argparse._StoreTrueAction,  # pylint: disable=protected-access
                             argparse._StoreFalseAction)):  # pylint: disable=protected-access
      argv.append(flag)
    elif isinstance(action, argparse._AppendAction):  # pylint: disable=protected-access
      for item in value:
        argv.append(f'{flag}={item}')
    elif value is None and action.type is argtypes.fraction_or_off:
      argv.append(f'{flag}=off')  # None is how 'off' parses.
    else:
      argv.append(f'{flag}={value}')
  return argv
