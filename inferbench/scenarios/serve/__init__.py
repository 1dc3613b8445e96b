"""Serving scenarios, with MLPerf LoadGen as the traffic generator and the judge: ``single-stream``, ``multi-stream``,
``server`` and ``offline`` (LoadGen's four), for every runtime.

In the cell's worker (after the phases every scenario shares, :class:`~inferbench.scenarios.base.Loaded`):

0. **samples placed**: the query samples are made resident where the runtime computes, once, in the layout and
   dtype it reads (a device tensor for torch on a GPU, a device array for JAX, a TensorFlow tensor on its device, the
   host array ONNX Runtime and OpenVINO read; the runner's ``resident``), and each batch is an index select there
   (``gather``): the tests measure the runtime, not host copies. ``--include-transfer`` keeps them on the host, each
   batch gathered and prepared (copied to the device) inside the test. The record says which (``serving.samples``).
1. **single query**: a short loop of one-sample calls gives the runtime's own latency, the start of every search;
   for ``server`` a bound (``--slo-p99``) below its p99 is one line: no load can meet it.
2. **served parity**: LoadGen's accuracy mode sends every query sample once; what the system under test (SUT)
   returned is compared with the Keras reference (as LoadGen's accuracy mode and TEST01 do), before anything is
   ranked.
3. **one LoadGen test per round** (the parent interleaves the cells' rounds, in a fresh random order each): the SUT
   wraps the runner — ``concurrency`` threads calling it (OpenVINO: an infer request each), and with a cell batch
   size above 1, dynamic batching (queries gathered up to the batch size, waiting at most ``max_delay_ms``, the
   batch padded to its static shape). LoadGen's latencies — from the scheduled send to the completion, queueing
   included — are the ones reported; its summary and detail logs are kept beside the record.

   - ``server``: a bracketing search per serving configuration (concurrency x batching delay) for the largest
     target QPS whose run is VALID (p99 within ``--slo-p99``, early stopping satisfied): double until INVALID,
     then bisect (geometric) until the bracket is within 10%; the best configuration's answer is then run again
     (confirmation rounds). The answer: at p99 <= X ms the runtime serves Q QPS [the bracket].
   - ``offline``: each round one Offline test, rounds cycling over the serving configurations; the answer is the
     best configuration's median samples per second with its interval between rounds.
   - ``single-stream`` (p90 of single queries) and ``multi-stream`` (p99 of 8-sample queries): each round one test.

``--quick`` shortens LoadGen's minimum duration (never the queries its early stopping needs for a VALID verdict);
the record says the result is not MLPerf-valid either way (MLPerf asks 10 minutes a test).

The package: :mod:`.loadgen` (LoadGen's settings, the system under test, its logs read), :mod:`.search` (the
server's search and the rule of a held load), :mod:`.session` (a cell's session, and the scenario module's
``merge`` and ``finalize_group``).
"""
