"""The inference engine: a model's forward at a fixed input shape, planned once, replayed
from one CUDA graph."""

from __future__ import annotations

from tensorconv import backend, cuda, timing
from tensorconv import graph as captured_graph
from tensorconv import precision as mma_precision
from tensorconv.checks import check_bools, is_int
from tensorconv.engine import planners
from tensorconv.engine.build import engine_kernels, model_input
from tensorconv.engine.plan import Plan, sections
from tensorconv.engine.registry import plan_module
from tensorconv.scratch import release_workspace


class InferenceEngine:
    """A model's forward at a fixed input shape, BN folded, replayed from a CUDA graph.

    Planning walks the model through the planners (:mod:`tensorconv.engine.planners`),
    each layer becoming launches into buffers allocated once; the rewrite passes then join
    neighbouring launches; the plan is warmed up (kernels loaded, workspaces sized) and
    captured into one CUDA graph on its own stream.  Every kernel the plan may need is
    compiled first, in parallel (:mod:`tensorconv.engine.build`).

    Parameters
    ----------
    model : Module
        On the GPU (``model.to("gpu")``); it is read once, at construction.
    input_shape : tuple (N, C, H, W)
    graph : bool
        Capture the plan into a CUDA graph (default); False runs it eagerly.
    tune : bool
        Time the candidates of every choice (tiles, fused launches against their parts)
        while planning and keep the verdicts in the tune cache; default False follows the
        verdicts already in the cache, else each choice's default.
    programmatic : bool, optional
        Let each kernel of the graph launch while the one before it drains
        (:mod:`tensorconv.graph`); default: where the device supports it (sm_90).
    precision : {"fp32", "tf32"}, optional
        Of the tensor-core kernels' products (:mod:`tensorconv.precision`): planning,
        tuning (the tune cache keeps each precision's choices apart) and the graph all
        use it; default: the current one, "fp32" unless set.
    build : bool
        Compile every kernel the plan may need up front, in parallel (default).
    dtype : {"float32", "float16"}
        "float16" runs the model in fp16 NHWC end to end on the tensor cores
        (:mod:`tensorconv.engine.half`; ``precision`` does not apply): the input stays
        (N, C, H, W) float32, converted by the first step, and the output is float16.
    concurrent : bool
        Run a module's independent paths side by side (a residual block's projection
        shortcut beside its first convolution, an inception module's branches, a fire
        module's expands: :class:`tensorconv.engine.plan.Branches`), each on a stream of
        its own forked from the engine's (default); False runs every launch in plan
        order on one stream.  The results are the same bit for bit.

    Call ``engine(x)`` with a CuPy/DLPack array of ``input_shape``; the result is
    a copy of the engine's output buffer, or the buffer itself (overwritten by the next
    call) with ``copy=False``.

    Attributes
    ----------
    launches : int
        Steps of the plan (launches, or a few CuPy calls).
    sections : int
        Runs of module branches that run side by side (0 with ``concurrent=False``).
    """

    def __init__(self, model, input_shape, *, graph: bool = True, tune: bool = False,
                 programmatic: bool | None = None, precision: str | None = None,
                 build: bool = True, dtype: str = "float32", concurrent: bool = True):
        cp = backend.require_cuda("InferenceEngine")
        if model.xp is not cp:
            raise ValueError("the model's parameters are on the CPU: call model.to('gpu') first")
        check_bools(graph=graph, tune=tune, build=build, concurrent=concurrent)
        if (not isinstance(input_shape, (tuple, list)) or len(input_shape) != 4
                or not all(is_int(s) and s >= 1 for s in input_shape)
                or model.in_channels != input_shape[1]):
            raise ValueError(f"input_shape must be (N, {model.in_channels}, H, W) of positive "
                             f"ints, got {input_shape!r}")
        self.input_shape = tuple(int(s) for s in input_shape)
        if programmatic is None:
            programmatic = captured_graph.supported()
        check_bools(programmatic=programmatic)
        if programmatic and not captured_graph.supported():
            raise ValueError("programmatic=True needs compute capability 9.0 or newer")
        self.plan = Plan(cp, tune=tune, precision=precision, dtype=dtype, concurrent=concurrent,
                         programmatic=graph and programmatic)
        self.precision = self.plan.precision
        self.stream = cp.cuda.Stream(non_blocking=True)
        # the planners read the model's device arrays: after the caller's writes to them
        self.stream.wait_event(cp.cuda.get_current_stream().record())
        with self.stream, mma_precision.using(self.precision):
            if build:
                kernels, self.plan.expected = engine_kernels(model, self.input_shape, tune=tune,
                                                             precision=self.precision,
                                                             dtype=dtype)
                cuda.compile_all(kernels, desc=f"compiling kernels for {type(model).__name__}")
            self.input = self.plan.keep(cp.zeros(self.input_shape, cp.float32))
            self.output = plan_module(model, self.plan, model_input(self.plan, self.input))
            for rewrite in planners.PASSES:
                rewrite(self.plan)
            if self.plan.progress is not None:
                self.plan.progress.close()
            self.plan.run()  # load kernels, size workspaces: nothing is allocated in capture
            self.plan.run()
            self.stream.synchronize()
            self.graph = None
            if graph:
                self.graph = captured_graph.CapturedGraph(self.stream, self.plan.run,
                                                          programmatic=programmatic)
        self.launches = len(self.plan.steps)
        # module branches run side by side: a section is a list of branches
        self.sections = sum(isinstance(item, list) for item in sections(self.plan.steps)
                            ) if concurrent else 0

    def __del__(self):
        # The graph goes with the engine: its streams' scratch need not outlive it.
        if getattr(self, "stream", None) is not None:
            release_workspace(self.stream)
        for stream in getattr(getattr(self, "plan", None), "side_streams", ()):
            release_workspace(stream)

    def replay(self) -> None:
        """Run the captured graph (or the eager plan) on the engine's input buffer."""
        with self.stream:
            if self.graph is not None:
                self.graph.launch(self.stream)
            else:
                self.plan.run()

    def time(self, **kwargs):
        """Latency of :meth:`replay` (a :class:`tensorconv.timing.Timing`), events recorded on
        the engine's own stream — on any other stream they would time nothing.  ``kwargs``
        go to :func:`tensorconv.timing.time_events`."""
        with self.stream:
            return timing.time_events(self.replay, **kwargs)

    def profile(self, repeat: int = 20) -> list[tuple[str, float]]:
        """Each launch of the plan timed alone: ``[(label, median µs), ...]`` in plan order.

        Each step is replayed twenty times back to back from a CUDA graph of its own
        (:func:`tensorconv.timing.time_graph`) on the engine's buffers, its input, weights
        and code hot in L2: what a launch costs relative to the others, not a breakdown of
        the graph's own time.  The sum is not :meth:`time`: that adds the first launch's
        start and the last one's drain (about 35 µs of ResNet-18-8x's 654 µs on an H200),
        and in the whole graph a layer's weights, and the code of a long body unrolled for
        them, come from memory again (``docs/notes/sparse_conv.md``).
        """
        if not (is_int(repeat) and repeat >= 1):
            raise ValueError(f"repeat must be a positive int, got {repeat!r}")
        with self.stream:
            return [(step.label, timing.time_graph(step, repeat=repeat).median_us)
                    for step in self.plan.steps]

    def __call__(self, x, copy: bool = True):
        x = backend.as_array(x, "x")
        if tuple(x.shape) != self.input_shape:
            raise ValueError(f"x has shape {tuple(x.shape)}; the engine was built for "
                             f"{self.input_shape}")
        cp = self.plan.xp
        if not backend.is_cupy_array(x):
            raise TypeError("x must be on the GPU (a CuPy or DLPack CUDA array)")
        cp.cuda.get_current_stream().synchronize()  # x may still be being written
        with self.stream:
            self.input[...] = x
        self.replay()
        self.stream.synchronize()
        return self.output.copy() if copy else self.output
