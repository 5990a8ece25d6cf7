"""The baselines themselves: scikit-learn fits on the raw columns of a split.

Three, each fit on the train split and measured on the eval split
(accuracy for a classifier, RMSE for a regression):
  * trivial: the most frequent train class (a regression: the train mean);
  * linear: logistic regression (a regression: ridge) on the tabular
    columns, numbers imputed with the mean and standardized, categories
    one-hot (the 100 most frequent, the rest one "infrequent" column), dates
    as calendar numbers;
  * strong: HistGradientBoosting on the tabular columns (categories through
    its native categorical support, ordinal-coded, the 255 most frequent),
    or, when the dataset has free-text columns, TF-IDF of word 1-2-grams of
    the text columns joined, beside the linear model's tabular columns, into
    logistic (ridge) regression.
scikit-learn's defaults otherwise: these are the models a user would try
first. HistGradientBoosting runs on one OpenMP thread: on this 2-core
machine (2026-12-07, load ~1) it fit digits in 2.6 s on one thread and
69.5 s on two, and 200,000 rows of 22 features in 10.3 s and 12.0 s (its
threads' synchronization costs more than the second core gives, the more so
beside the pipeline's other processes); the linear solvers use the BLAS
threads.
"""
import contextlib
import dataclasses
import time
import warnings
from typing import Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np
import pandas as pd
import threadpoolctl
from sklearn import compose
from sklearn import ensemble
from sklearn import exceptions as sklearn_exceptions
from sklearn import feature_extraction
from sklearn import impute
from sklearn import linear_model
from sklearn import pipeline as sklearn_pipeline
from sklearn import preprocessing

from leantfx import config as config_lib

MAJORITY = 'majority'
MEAN = 'mean'
LINEAR = 'linear'
STRONG = 'strong'
# Linear models: categories beyond the most frequent 100 share a column.
_MAX_ONE_HOT = 100
# HistGradientBoosting takes at most 255 categories per feature (max_bins).
_MAX_ORDINAL = 255
_TEXT_COLUMN = '__text__'


@dataclasses.dataclass(frozen=True)
class Baseline:
  """One baseline's eval-split figure.

  Attributes:
    name: 'majority' or 'mean', 'linear', 'strong'.
    model: what was fit, in words.
    value: eval accuracy (classification) or RMSE (regression); None when
      this baseline was not fit (``note`` says why).
    fit_seconds: the fit's wall time (predicting the eval split included).
    note: why it was not fit, or what to know about the fit.
  """
  name: str
  model: str
  value: Optional[float]
  fit_seconds: float
  note: str = ''


@dataclasses.dataclass(frozen=True)
class Roles:
  """The raw columns the baselines read, by how they are read."""
  numeric: Tuple[str, ...]
  categorical: Tuple[str, ...]
  text: Tuple[str, ...]
  dates: Tuple[Tuple[str, str], ...]  # (key, strptime format)

  @property
  def keys(self) -> Tuple[str, ...]:
    return (self.numeric + self.categorical + self.text +
            tuple(k for k, _ in self.dates))

  @property
  def tabular(self) -> bool:
    return bool(self.numeric or self.categorical or self.dates)


def roles_of(spec: config_lib.DatasetSpec) -> Roles:
  """The DatasetSpec's columns by role; pixel columns are numbers.

  An encoded image (image_key) has no column a tabular model can read.
  """
  return Roles(numeric=spec.numeric_features + spec.image_features,
               categorical=spec.categorical_features,
               text=spec.text_features,
               dates=tuple(sorted(spec.date_format.items())))


def _date_columns(key: str, values: np.ndarray, fmt: str
                 ) -> Dict[str, np.ndarray]:
  """A date column as numbers: days since 1970, month, weekday, hour.

  A value that does not follow the format is missing (NaN), as the
  Transform's date features take it.
  """
  parsed = pd.to_datetime(pd.Series(values, dtype=object), format=fmt,
                          errors='coerce', utc=True)
  days = (parsed - pd.Timestamp(0, tz='UTC')).dt.total_seconds() / 86400.0
  return {f'{key}.days': days.to_numpy(dtype=float),
          f'{key}.month': parsed.dt.month.to_numpy(dtype=float),
          f'{key}.weekday': parsed.dt.weekday.to_numpy(dtype=float),
          f'{key}.hour': parsed.dt.hour.to_numpy(dtype=float)}


def frame(columns: Mapping[str, np.ndarray], roles: Roles) -> pd.DataFrame:
  """The model-ready frame: numbers (NaN missing), categories as text, dates
  as numbers, the text columns joined into one."""
  data: Dict[str, np.ndarray] = {}
  for key in roles.numeric:
    data[key] = pd.to_numeric(pd.Series(columns[key]),
                              errors='coerce').to_numpy(dtype=float)
  for key in roles.categorical:
    data[key] = np.asarray(columns[key]).astype(str).astype(object)
  for key, fmt in roles.dates:
    data.update(_date_columns(key, columns[key], fmt))
  if roles.text:
    joined = pd.Series(columns[roles.text[0]], dtype=object).astype(str)
    for key in roles.text[1:]:
      joined = joined + ' ' + pd.Series(columns[key], dtype=object).astype(str)
    data[_TEXT_COLUMN] = joined.to_numpy(dtype=object)
  return pd.DataFrame(data)


def _numbers(df: pd.DataFrame, roles: Roles) -> List[str]:
  return [c for c in df.columns
          if c != _TEXT_COLUMN and c not in roles.categorical]


def _linear_columns(df: pd.DataFrame, roles: Roles, text: bool
                   ) -> compose.ColumnTransformer:
  parts = []
  numbers = _numbers(df, roles)
  if numbers:
    parts.append(('numbers', sklearn_pipeline.make_pipeline(
        impute.SimpleImputer(strategy='mean', keep_empty_features=True),
        preprocessing.StandardScaler()), numbers))
  if roles.categorical:
    parts.append(('categories', preprocessing.OneHotEncoder(
        handle_unknown='infrequent_if_exist', max_categories=_MAX_ONE_HOT),
                  list(roles.categorical)))
  if text:
    parts.append(('text', feature_extraction.text.TfidfVectorizer(
        ngram_range=(1, 2), min_df=2, sublinear_tf=True), _TEXT_COLUMN))
  return compose.ColumnTransformer(parts, sparse_threshold=0.3)


def _linear_estimator(task: str):
  if task == 'regression':
    return linear_model.Ridge()
  return linear_model.LogisticRegression(max_iter=1000)


def _boosting(df: pd.DataFrame, roles: Roles, task: str):
  numbers = _numbers(df, roles)
  columns = compose.ColumnTransformer(
      [('numbers', 'passthrough', numbers),
       ('categories', preprocessing.OrdinalEncoder(
           handle_unknown='use_encoded_value', unknown_value=np.nan,
           encoded_missing_value=np.nan, max_categories=_MAX_ORDINAL),
        list(roles.categorical))])
  categorical = [False] * len(numbers) + [True] * len(roles.categorical)
  estimator = (ensemble.HistGradientBoostingRegressor
               if task == 'regression' else
               ensemble.HistGradientBoostingClassifier)
  return sklearn_pipeline.make_pipeline(
      columns, estimator(categorical_features=categorical or None,
                         random_state=0))


def score(task: str, truth: np.ndarray, predicted: np.ndarray) -> float:
  """Accuracy (classification) or RMSE (regression)."""
  if task == 'regression':
    return float(np.sqrt(np.mean((np.asarray(predicted, dtype=float) -
                                  np.asarray(truth, dtype=float)) ** 2)))
  return float(np.mean(np.asarray(predicted) == np.asarray(truth)))


def trivial(task: str, train_y: np.ndarray, eval_y: np.ndarray) -> Baseline:
  """The most frequent train class, or the train mean, for every eval row."""
  start = time.perf_counter()
  if task == 'regression':
    mean = float(np.mean(train_y))
    value = score(task, eval_y, np.full(len(eval_y), mean))
    return Baseline(MEAN, f'the train mean ({mean:.6g})', value,
                    time.perf_counter() - start)
  labels, counts = np.unique(train_y, return_counts=True)
  majority = labels[int(np.argmax(counts))]
  value = score(task, eval_y, np.full(len(eval_y), majority, dtype=object))
  return Baseline(MAJORITY, f'the most frequent train class ({majority!r})',
                  value, time.perf_counter() - start)


def _timed_fit(name: str, model_text: str, build: Callable[[], object],
               task: str, train: Tuple[pd.DataFrame, np.ndarray],
               evaluation: Tuple[pd.DataFrame, np.ndarray],
               openmp_threads: Optional[int] = None) -> Baseline:
  """Fits build() on train, scores it on evaluation; a failed fit is a note.

  ``openmp_threads``: the OpenMP threads the fit may use (None: the
  library's default).
  """
  start = time.perf_counter()
  note = ''
  limits = (contextlib.nullcontext() if openmp_threads is None else
            threadpoolctl.threadpool_limits(openmp_threads, user_api='openmp'))
  with warnings.catch_warnings(record=True) as caught, limits:
    warnings.simplefilter('always', sklearn_exceptions.ConvergenceWarning)
    try:
      model = build()
      model.fit(*train)
      value = score(task, evaluation[1], model.predict(evaluation[0]))
    except (ValueError, TypeError, MemoryError) as e:
      return Baseline(name, model_text, None, time.perf_counter() - start,
                      f'not fit: {e}')
  if any(issubclass(w.category, sklearn_exceptions.ConvergenceWarning)
         for w in caught):
    note = 'the solver stopped at its iteration limit before converging'
  return Baseline(name, model_text, value, time.perf_counter() - start, note)


def _describe(roles: Roles, text: bool) -> str:
  parts = []
  for what, keys in (('numeric', roles.numeric),
                     ('categorical', roles.categorical),
                     ('date', roles.dates)):
    if keys:
      parts.append(f'{len(keys)} {what}')
  if text:
    parts.append(f'TF-IDF 1-2-grams of {len(roles.text)} text')
  return ', '.join(parts) + ' column(s)'


def linear(task: str, roles: Roles, train: Tuple[pd.DataFrame, np.ndarray],
           evaluation: Tuple[pd.DataFrame, np.ndarray]) -> Baseline:
  """Logistic (ridge) regression on the tabular columns."""
  kind = 'Ridge' if task == 'regression' else 'LogisticRegression'
  if not roles.tabular:
    return Baseline(LINEAR, kind, None, 0.0,
                    'not fit: the dataset has no tabular column')
  return _timed_fit(
      LINEAR, f'{kind} on {_describe(roles, False)}',
      lambda: sklearn_pipeline.make_pipeline(
          _linear_columns(train[0], roles, text=False),
          _linear_estimator(task)), task, train, evaluation)


def strong(task: str, roles: Roles, train: Tuple[pd.DataFrame, np.ndarray],
           evaluation: Tuple[pd.DataFrame, np.ndarray]) -> Baseline:
  """TF-IDF + logistic (ridge) regression with text, else HistGradientBoosting."""
  if roles.text:
    kind = 'Ridge' if task == 'regression' else 'LogisticRegression'
    return _timed_fit(
        STRONG, f'{kind} on {_describe(roles, True)}',
        lambda: sklearn_pipeline.make_pipeline(
            _linear_columns(train[0], roles, text=True),
            _linear_estimator(task)), task, train, evaluation)
  kind = ('HistGradientBoostingRegressor' if task == 'regression' else
          'HistGradientBoostingClassifier')
  if not roles.tabular:
    return Baseline(STRONG, kind, None, 0.0,
                    'not fit: the dataset has no tabular or text column '
                    '(encoded images)')
  return _timed_fit(STRONG, f'{kind} on {_describe(roles, False)}',
                    lambda: _boosting(train[0], roles, task), task, train,
                    evaluation, openmp_threads=1)


def fit_all(task: str, roles: Roles, label: str,
            train_columns: Mapping[str, np.ndarray],
            eval_columns: Mapping[str, np.ndarray]) -> List[Baseline]:
  """The trivial, linear and strong baselines, in that order.

  Args:
    task: 'classification' or 'regression'.
    roles: the columns to read (roles_of).
    label: the label's feature key.
    train_columns: the train split's columns (rows.read_split).
    eval_columns: the eval split's columns.

  Returns:
    The three Baselines.
  """
  def label_of(columns):
    y = np.asarray(columns[label])
    if task == 'regression':
      return pd.to_numeric(pd.Series(y), errors='coerce').to_numpy(float)
    return y.astype(str).astype(object)

  train = (frame(train_columns, roles), label_of(train_columns))
  evaluation = (frame(eval_columns, roles), label_of(eval_columns))
  return [trivial(task, train[1], evaluation[1]),
          linear(task, roles, train, evaluation),
          strong(task, roles, train, evaluation)]
