"""The server-wide memory budget of requests in flight, and the refusals.

Each request reserves what it is expected to hold in memory before its work
starts: over REST a multiple of its body (``REST_WORKING_FACTOR``), over gRPC
its message plus twice its decoded tensors (inputs and what the model writes
back). A request that does not fit in what the running ones left is refused
at once (HTTP 503 with ``Retry-After``, gRPC ``UNAVAILABLE``) instead
of growing the process until the kernel kills it. One request larger than
the whole budget runs only when nothing else holds any of it, so a budget
smaller than the largest allowed body never locks a request out for good.

The factors come from the request path's measured peaks (tracemalloc over
``RestApi.handle``, 2026-12-07): a 15 MB columnar body of 100,000 digits
rows peaked at 12x its size (its parsed lists, its arrays, the 28 MB
answer and its tokens), a 17 MB row-format body of 20,000 rows at 15x (a
dict per row).
"""
import ctypes
import ctypes.util
import threading
from typing import Optional

from leantfx.serving import status

# Working memory of a REST request, as a multiple of its body (the peaks
# above, rounded up).
REST_WORKING_FACTOR = 16
# A gRPC request holds its message, its decoded inputs and the outputs.
GRPC_DECODED_FACTOR = 2
# Seconds a refused client is told to wait (the Retry-After header): the
# shortest the header says; a client back too soon is refused again, at
# the cost of a header read.
RETRY_AFTER_S = 1
# 1 GiB: four requests of the largest default body (16 MiB x 16) at once,
# on top of the ~0.6 GB a server holding a few models idles at.
DEFAULT_MAX_IN_FLIGHT_BYTES = 1024 * 1024 * 1024
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
# Rows of one model call when a predict request is run in parts: 8192 rows
# of the digits model's 64 floats are 2 MiB in, a call of a few ms, so a
# part costs about what the whole would per row, and the model's working
# memory stays at one part's.
DEFAULT_MAX_ROWS_PER_CALL = 8192
# Rows of one TFLite call when a request is run in parts: its invoke holds
# the GIL (tflite_servable), and 1024 digits rows are about 1 ms of it, no
# longer than the server's other steps between which small requests run.
TFLITE_MAX_ROWS_PER_CALL = 1024
# A request's tensors may decode to at most this multiple of the largest
# body: 4 is what a REST body can decode to (a 2-byte "1," becomes an 8-byte
# int64 or double), so no valid REST request is refused by it, and a gRPC
# request declaring a shape its few bytes do not carry is.
DECODED_BYTES_PER_BODY_BYTE = 4


# A request that reserved this much gives its memory back to the system when
# it ends: glibc keeps freed blocks in its heap, so without malloc_trim a
# server's RSS stays at the peak of its largest request.
_TRIM_BYTES = 16 * 1024 * 1024


def _load_malloc_trim():
  try:
    return ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6').malloc_trim
  except (OSError, AttributeError):  # Not glibc: nothing to trim.
    return None


_MALLOC_TRIM = _load_malloc_trim()


def give_back_memory() -> None:
  """Returns the heap's free pages to the system (glibc's malloc_trim)."""
  if _MALLOC_TRIM is not None:
    _MALLOC_TRIM(0)  # ctypes releases the GIL for the call.


def max_decoded_bytes(max_body_bytes: int) -> int:
  """The most a request's tensors may decode to, given the body limit."""
  return DECODED_BYTES_PER_BODY_BYTE * max_body_bytes


class MemoryBudget:
  """Bytes reserved by the requests in flight, up to a capacity."""

  def __init__(self, capacity_bytes: int):
    """Creates an empty budget.

    Args:
      capacity_bytes: the most the requests in flight may reserve together.
    """
    self.capacity_bytes = capacity_bytes
    self._reserved = 0
    self._lock = threading.Lock()

  @property
  def reserved_bytes(self) -> int:
    return self._reserved

  def try_reserve(self, size_bytes: int) -> Optional['Reservation']:
    """Reserves `size_bytes`; None when they do not fit now.

    A request larger than the whole capacity is given all of it when
    nothing else is reserved.
    """
    size = min(max(0, int(size_bytes)), self.capacity_bytes)
    with self._lock:
      if self._reserved + size > self.capacity_bytes:
        return None
      self._reserved += size
    return Reservation(self, size)

  def _release(self, size: int) -> None:
    with self._lock:
      self._reserved -= size
    if size >= _TRIM_BYTES:
      give_back_memory()

  def refusal_text(self, size_bytes: int) -> str:
    """What a refused client is told."""
    return (f'The server is busy: this request needs about {_mib(size_bytes)} '
            f'of working memory and the requests in flight hold '
            f'{_mib(self._reserved)} of the {_mib(self.capacity_bytes)} '
            f'budget (--max-in-flight-bytes). Retry after {RETRY_AFTER_S} s.')


class Reservation:
  """Bytes held in a MemoryBudget until release() (or the ``with`` ends)."""

  __slots__ = ('_budget', '_size')

  def __init__(self, budget: MemoryBudget, size: int):
    self._budget = budget
    self._size = size

  def release(self) -> None:
    """Gives the bytes back (once; later calls do nothing)."""
    if self._size:
      self._budget._release(self._size)  # pylint: disable=protected-access
      self._size = 0

  def __enter__(self) -> 'Reservation':
    return self

  def __exit__(self, *exc) -> None:
    self.release()


class RequestLimits:
  """What one server allows a request: decoded size and a share of memory."""

  def __init__(self, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               max_in_flight_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES):
    """Creates the limits.

    Args:
      max_body_bytes: the largest REST body and gRPC message.
      max_in_flight_bytes: the budget the requests in flight share.
    """
    self.max_body_bytes = max_body_bytes
    self.max_decoded_bytes = max_decoded_bytes(max_body_bytes)
    self.budget = MemoryBudget(max_in_flight_bytes)

  def reserve(self, size_bytes: int) -> Reservation:
    """Reserves a request's working memory (use with ``with``).

    Raises:
      ServingError: UNAVAILABLE (HTTP 503) when it does not fit now.
    """
    reservation = self.budget.try_reserve(size_bytes)
    if reservation is None:
      raise status.unavailable(self.budget.refusal_text(size_bytes))
    return reservation


def _mib(size_bytes: int) -> str:
  return f'{size_bytes / (1024 * 1024):.1f} MiB'
