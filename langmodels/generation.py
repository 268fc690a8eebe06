"""Batched chat generation with one causal LM, and grammar-constrained decoding for structured outputs.

`Engine` turns many chat requests into one batch: each request's prompt is prefilled once (left padded, with its
attention mask and positions counted from its first real token), its KV cache rows are repeated for its `n`
choices, and one decode loop then samples every row with its own temperature, top-p, random generator and,
for structured outputs, its own grammar. A row leaves the batch as soon as it finishes, so long answers do not
make short ones pay for their steps.

Prompts that share a prefix (the judge's rubric, a family's system message) share its KV cache: a batch's
common prefix, rounded down to whole blocks of `PREFIX_BLOCK` tokens, is prefilled once, kept in a small LRU of
prefixes, and reused by later batches that start with it (a longer prefix is built on top of a shorter cached
one). Each row's remaining tokens are then prefilled with padding between the prefix and them, which the
attention mask hides; positions still count real tokens only, so the result equals an unshared prefill.

Rows of very different lengths (a judge request with a long tool list next to one with a short question) are
prefilled in groups of similar length, longest first, and their KV caches are then joined into one padded batch
for the decode loop: a short row does not pay to prefill the padding a long one would give it. The padding
positions are zeros that the mask hides, so the joined cache equals one prefilled as a single padded batch.

The decode loop writes each step's keys and values into room reserved after the prompt (`_RoomyLayer`), in
chunks of `DECODE_ROOM` tokens (`Engine.decode_room`), where a plain `DynamicCache` concatenates and so copies
the whole cache every step: with long prompts that copy costs as much as reading the weights.

Structured outputs use llguidance: a JSON Schema (or "any JSON object") is compiled once into a grammar and each
constrained row gets a matcher over it. Before every sampling step the matcher's allowed-token bitmask sets all
other logits to -inf; the sampled token is then consumed by the matcher, and the row ends when the matcher is
stopped (only EOS could follow). Every finished constrained row is therefore valid JSON for its schema by
construction; only a row cut by `max_tokens` (finish reason "length") can be incomplete.

The decode loop is written here rather than given to `model.generate`, because per-row temperature, top-p,
seeds and stop strings, and dropping finished rows from the KV cache, are each a few lines here and each a
workaround there (one sampling config and one random generator per `generate` call).

Example:
    >>> engine = Engine.load("/models/smollm2")  # doctest: +SKIP
    >>> prompt = engine.prompt_ids([{"role": "user", "content": "Name a colour as JSON."}])  # doctest: +SKIP
    >>> grammar = engine.json_grammar({"type": "object"})  # doctest: +SKIP
    >>> [result] = engine.generate([GenerationRequest(prompt, n=2, max_tokens=32, grammar=grammar)])  # doctest: +SKIP
    >>> [c.text for c in result.completions]  # doctest: +SKIP
    ['{"colour": "blue"}', '{"name": "red"}']
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import llguidance
import llguidance.hf
import llguidance.torch
import torch
from transformers.cache_utils import CacheLayerMixin, DynamicLayer

from core import SeedwheelError

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # the stub's home; llguidance does not re-export it
    from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

FinishReason = Literal["stop", "length"]

# Compact JSON with json.dumps' separators: the spacing models saw most in training, and no free whitespace,
# which a small model can otherwise emit until max_tokens (newline after newline inside an object).
# A schema can still override these through its own "x-guidance" key.
JSON_OPTIONS: JsonCompileOptions = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
}
# Distinct schemas kept compiled; a pipeline sends a handful (the judge's, the rewriter's) many times.
GRAMMAR_CACHE_SIZE = 64
# Shared prompt prefixes are cached in whole blocks of this many tokens, so batches whose common prefix ends a
# little differently (a one-request batch shares its whole prompt with itself) still land on the same entry.
PREFIX_BLOCK = 64
# Prefixes kept (least recently used dropped first); one is a few MB per 100 tokens for a 135M model.
PREFIX_CACHE_ENTRIES = 4
# A row joins the prefill group of the longer rows before it while its padding there is at most this many tokens,
# about what one more forward call costs on CPU; a longer gap starts a new group (`prefill_groups`).
PREFILL_PADDING = 32
# Tokens of room reserved at a time for decode steps' keys and values: one copy of the cache per this many steps.
DECODE_ROOM = 256


class InvalidGenerationRequest(SeedwheelError, ValueError):
    """A request that cannot be generated as given (a bad schema, a prompt too long); the message says the fix.

    Attributes:
        param: The request field at fault, in OpenAI's dotted form (e.g. `response_format.json_schema.schema`).
    """

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class GrammarError(SeedwheelError, RuntimeError):
    """A constrained row reached a state its grammar does not allow: a bug here or in llguidance, never the user's."""


@dataclass(frozen=True)
class GenerationRequest:
    """One chat request, tokenized, with its sampling settings.

    Args:
        prompt_ids: The prompt's token ids (chat template applied; see `Engine.prompt_ids`).
        n: How many choices to sample from this prompt.
        max_tokens: Most tokens per choice; a choice cut here ends with finish reason "length".
        temperature: 0 is greedy decoding; higher values flatten the distribution.
        top_p: Nucleus sampling: sample among the most likely tokens whose probabilities add up to `top_p`.
        seed: Seeds this request's random generator, so a request repeated alone gives the same choices.
        stop: Strings that end a choice; the text is cut before the first one found.
        grammar: An llguidance grammar (from `Engine.json_grammar`) every choice must follow; None for free text.
    """

    prompt_ids: Sequence[int]
    n: int = 1
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: Sequence[str] = ()
    grammar: str | None = None

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError("prompt_ids is empty: a prompt needs at least one token (use Engine.prompt_ids).")
        if self.n < 1 or self.max_tokens < 1:
            raise ValueError(f"n ({self.n}) and max_tokens ({self.max_tokens}) must both be at least 1.")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"temperature ({self.temperature}) must be >= 0 and top_p ({self.top_p}) in (0, 1].")


@dataclass(frozen=True)
class Completion:
    """One generated choice.

    Attributes:
        text: The decoded answer (stop string and EOS excluded).
        finish_reason: "stop" (EOS, a stop string, or a complete structured answer) or "length".
        tokens: Tokens generated for it (the stop token not counted).
        token_ids: The sampled token ids, the stop token that ended it included (what a trainer learns to end with).
    """

    text: str
    finish_reason: FinishReason
    tokens: int
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class GenerationResult:
    """The choices of one request, in order, and its prompt length."""

    completions: list[Completion]
    prompt_tokens: int
    cached_tokens: int = 0  # of prompt_tokens, how many were read from the prefix cache instead of prefilled

    @property
    def completion_tokens(self) -> int:
        """Tokens generated over all choices."""
        return sum(c.tokens for c in self.completions)


@dataclass
class _Row:
    """The decode state of one choice."""

    request: int
    max_tokens: int
    stop: Sequence[str]
    matcher: llguidance.LLMatcher | None
    tokens: list[int] = field(default_factory=list)
    text: str | None = None  # set when a stop string cut it
    finish_reason: FinishReason | None = None
    stop_token: int | None = None  # the stop token that ended it, if one did


class Engine:
    """One causal LM and its tokenizer, generating batches of chat requests (call from one thread at a time).

    Args:
        model: A loaded causal LM (eval mode is set here).
        tokenizer: Its tokenizer; a fast one with a chat template.
        prefix_cache_entries: Shared prompt prefixes whose KV cache is kept between batches; 0 turns prefix
            sharing off (every prompt is prefilled whole, as a baseline to measure it against).
        prefill_padding: Most padding tokens a row is prefilled with in a group of longer rows (see
            `prefill_groups`); None prefills a batch as one group padded to its longest row (the baseline).
            Models with sliding-window layers always take one group.
        decode_room: Tokens of room reserved at a time after the prompt for the decode steps' keys and values
            (`_RoomyLayer`); None lets every step concatenate onto the cache, copying it (the baseline).

    Raises:
        ValueError: The tokenizer has no chat template, or is not a fast tokenizer (llguidance needs one).

    Example:
        >>> tokenizer = AutoTokenizer.from_pretrained(path)  # doctest: +SKIP
        >>> engine = Engine(AutoModelForCausalLM.from_pretrained(path), tokenizer)  # doctest: +SKIP
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        prefix_cache_entries: int = PREFIX_CACHE_ENTRIES,
        prefill_padding: int | None = PREFILL_PADDING,
        decode_room: int | None = DECODE_ROOM,
    ) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"The tokenizer of {model.name_or_path} has no chat template, so chat messages cannot be turned "
                "into a prompt: serve an instruct/chat model, or add a chat_template to its tokenizer_config.json."
            )
        from transformers import PreTrainedTokenizerFast

        if not isinstance(tokenizer, PreTrainedTokenizerFast):
            raise ValueError(
                f"The tokenizer of {model.name_or_path} is a slow {type(tokenizer).__name__}; constrained decoding "
                "(llguidance) needs a fast one: load it with AutoTokenizer.from_pretrained(path, use_fast=True)."
            )
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = model.device
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.context_length: int | None = getattr(model.config.get_text_config(), "max_position_embeddings", None)
        self.stop_ids = _stop_token_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.stop_ids)
        # The grammar's EOS is every token that ends a turn, so a finished answer may end with any of them.
        self.ll_tokenizer = llguidance.hf.from_tokenizer(
            tokenizer, n_vocab=max(self.vocab_size, len(tokenizer)), eos_token=sorted(self.stop_ids)
        )
        self._executor = llguidance.LLExecutor()
        # Handlers tokenize prompts while the worker decodes answers; a fast tokenizer shared across threads can
        # fail with "Already borrowed" when calls overlap.
        self._tokenizer_lock = threading.Lock()
        self._compile = functools.lru_cache(maxsize=GRAMMAR_CACHE_SIZE)(self._compile_uncached)
        self.prefix_cache_entries = prefix_cache_entries
        self._prefixes: OrderedDict[tuple[int, ...], DynamicCache] = OrderedDict()
        # Joining group caches pads their middle; a sliding-window layer keeps only its window, so it cannot be.
        self.prefill_padding = None if _has_sliding_layers(model) else prefill_padding
        self.decode_room = decode_room

    @classmethod
    def load(cls, model: str, *, device: str = "cpu") -> Engine:
        """Load a model directory or cached hub id with transformers.

        Args:
            model: A local model directory or a model id in the local hub cache.
            device: Where to run it: `cpu`, `cuda`, `cuda:1`.

        Returns:
            The engine, ready to generate.

        Example:
            >>> Engine.load("/models/smollm2", device="cpu").context_length  # doctest: +SKIP
            8192
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
        loaded = AutoModelForCausalLM.from_pretrained(model, dtype="auto")
        loaded = loaded.to(device)  # type: ignore[arg-type]  # transformers types .to's wrapper as taking the model
        return cls(loaded, tokenizer)

    # --- request preparation (any thread) ---------------------------------------------------------------------

    def prompt_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The chat template applied to `messages`, ending with the assistant's turn opener.

        Args:
            messages: `{"role", "content"}` dicts with plain-text content.

        Returns:
            The prompt's token ids.

        Raises:
            InvalidGenerationRequest: The chat template rejects the messages (e.g. roles out of order).

        Example:
            >>> engine.prompt_ids([{"role": "user", "content": "hi"}])[:3]  # doctest: +SKIP
            [1, 9690, 198]
        """
        from jinja2.exceptions import TemplateError

        try:
            with self._tokenizer_lock:
                ids = self.tokenizer.apply_chat_template(
                    [dict(m) for m in messages], add_generation_prompt=True, tokenize=True, return_dict=False
                )
        except TemplateError as exc:
            raise InvalidGenerationRequest(
                f"The model's chat template rejected these messages: {exc}. Reorder or merge the messages "
                "as the template expects (e.g. alternate user and assistant turns).",
                param="messages",
            ) from exc
        return list(ids)

    def json_grammar(self, schema: Mapping[str, Any] | None) -> str:
        """Compile a JSON Schema (None: any JSON object) into an llguidance grammar for this tokenizer.

        Args:
            schema: The JSON Schema every answer must follow, or None for "any JSON object".

        Returns:
            The grammar, for `GenerationRequest.grammar`; compiled grammars are cached per schema.

        Raises:
            InvalidGenerationRequest: The schema is not JSON data, or llguidance cannot compile it; the message
                has llguidance's reason.

        Example:
            >>> schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
            >>> grammar = engine.json_grammar(schema)  # doctest: +SKIP
        """
        try:
            text = json.dumps({"type": "object"} if schema is None else schema, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidGenerationRequest(
                f"The schema is not plain JSON data ({exc}).", param="response_format.json_schema.schema"
            ) from exc
        return self._compile(text)

    def _compile_uncached(self, schema_json: str) -> str:
        param = "response_format.json_schema.schema"
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema_json, defaults=JSON_OPTIONS)
        except ValueError as exc:
            raise InvalidGenerationRequest(f"The schema is not a JSON object: {exc}", param=param) from exc
        problem = llguidance.LLMatcher.validate_grammar(grammar, self.ll_tokenizer)
        if problem:
            raise InvalidGenerationRequest(
                f"The JSON Schema cannot be compiled for constrained decoding: {problem}. Fix the schema "
                "(it must be a valid JSON Schema; see llguidance's supported keywords), or send "
                'response_format={"type": "json_object"} for any JSON object.',
                param=param,
            )
        return grammar

    # --- generation (one thread) ------------------------------------------------------------------------------

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Generate every choice of every request in one batch.

        Args:
            requests: The requests; their rows (`n` each) are decoded together.

        Returns:
            One result per request, in order.

        Raises:
            InvalidGenerationRequest: A prompt plus its `max_tokens` does not fit the model's context.
            GrammarError: A constrained row reached a state its grammar forbids (a bug, not a user error).

        Example:
            >>> [result] = engine.generate([GenerationRequest(engine.prompt_ids(msgs), n=3)])  # doctest: +SKIP
        """
        if not requests:
            return []
        for request in requests:
            self._check_fits(request)
        rows = [
            _Row(
                request=index,
                max_tokens=request.max_tokens,
                stop=request.stop,
                matcher=None if request.grammar is None else llguidance.LLMatcher(self.ll_tokenizer, request.grammar),
            )
            for index, request in enumerate(requests)
            for _ in range(request.n)
        ]
        generators = [self._generator(request.seed) for request in requests]
        with torch.inference_mode():
            cached = self._decode(requests, rows, generators)
        results: list[list[Completion]] = [[] for _ in requests]
        for row in rows:
            text = row.text if row.text is not None else self._decode_text(row.tokens)
            assert row.finish_reason is not None
            ended = () if row.stop_token is None else (row.stop_token,)
            results[row.request].append(Completion(text, row.finish_reason, len(row.tokens), (*row.tokens, *ended)))
        return [
            GenerationResult(choices, len(r.prompt_ids), cached) for choices, r in zip(results, requests, strict=True)
        ]

    def fits(self, prompt_tokens: int, max_tokens: int) -> bool:
        """Whether a prompt of this many tokens plus `max_tokens` answer tokens fits the model's context."""
        return self.context_length is None or prompt_tokens + max_tokens <= self.context_length

    def _check_fits(self, request: GenerationRequest) -> None:
        if not self.fits(len(request.prompt_ids), request.max_tokens):
            raise InvalidGenerationRequest(
                f"The prompt ({len(request.prompt_ids)} tokens) plus max_tokens ({request.max_tokens}) exceeds the "
                f"model's context ({self.context_length} tokens): lower max_tokens or shorten the messages.",
                param="max_tokens",
            )

    def _decode_text(self, tokens: list[int]) -> str:
        with self._tokenizer_lock:
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        assert isinstance(text, str)  # one sequence of ids decodes to one string
        return text

    def _generator(self, seed: int | None) -> torch.Generator:
        generator = torch.Generator(device=self.device)
        generator.manual_seed(secrets.randbits(63) if seed is None else seed)
        return generator

    def _decode(
        self, requests: Sequence[GenerationRequest], rows: list[_Row], generators: list[torch.Generator]
    ) -> int:
        """Prefill each prompt once, repeat its cache for its rows, then sample until every row has finished.

        Returns how many prompt tokens of each request came from the prefix cache.
        """
        offset, cached, prefix = self._shared_prefix(requests)
        lengths = [len(request.prompt_ids) - offset for request in requests]
        width = max(lengths)
        # The batch's layout: the shared prefix, then each row's own tokens right-aligned after padding.
        attention = torch.zeros((len(requests), offset + width), dtype=torch.long, device=self.device)
        attention[:, :offset] = 1
        for i, length in enumerate(lengths):
            attention[i, offset + width - length :] = 1
        groups = prefill_groups(lengths, self.prefill_padding)
        caches, last_logits = [], []
        for k, group in enumerate(groups):
            # Each group fills a copy of the prefix's cache (the last one takes the batch's own copy).
            start = prefix if prefix is None or k == len(groups) - 1 else copy.deepcopy(prefix)
            cache, logits = self._prefill([requests[i] for i in group], offset, attention[group], start)
            caches.append(cache)
            last_logits.append(logits)
        cache = caches[0] if len(groups) == 1 else _join_caches(caches, offset, width, self.model.config)
        logits = torch.cat(last_logits)
        # The groups hold the requests longest first; each of a request's n rows takes its prefill by indexing
        # (the cache and the logits in group order, the mask in request order).
        place = {request: k for k, request in enumerate(i for group in groups for i in group)}
        expand = torch.tensor([place[row.request] for row in rows], device=self.device)
        cache.batch_select_indices(expand)
        if self.decode_room is not None:
            _reserve_room(cache, min(max(row.max_tokens for row in rows), self.decode_room))
        logits = logits[expand]
        attention = attention[[row.request for row in rows]]
        # Positions count real tokens only: the next one is the prompt's length.
        next_position = torch.tensor([len(requests[row.request].prompt_ids) for row in rows], device=self.device)
        temperature = torch.tensor([requests[r.request].temperature for r in rows], device=self.device)
        top_p = torch.tensor([requests[r.request].top_p for r in rows], device=self.device)
        live = list(range(len(rows)))  # rows[live[i]] is batch row i
        while True:
            self._mask(logits, [rows[i] for i in live])
            tokens = sample(logits, temperature, top_p, [generators[rows[i].request] for i in live])
            sampled = tokens.tolist()
            kept = [k for k, i in enumerate(live) if not self._advance(rows[i], sampled[k])]
            if not kept:
                return cached
            if len(kept) < len(live):
                index = torch.tensor(kept, device=self.device)
                cache.batch_select_indices(index)
                attention, next_position = attention[index], next_position[index]
                temperature, top_p, tokens = temperature[index], top_p[index], tokens[index]
                live = [live[k] for k in kept]
            attention = torch.cat([attention, attention.new_ones((len(live), 1))], dim=1)
            out = self.model(
                input_ids=tokens.unsqueeze(1),
                attention_mask=attention,
                position_ids=next_position.unsqueeze(1),
                cache=cache,
                use_cache=True,
            )
            logits = out.logits[:, -1, :].float()
            next_position = next_position + 1

    def _prefill(
        self,
        requests: Sequence[GenerationRequest],
        offset: int,
        attention: torch.Tensor,
        prefix: DynamicCache | None,
    ) -> tuple[DynamicCache, torch.Tensor]:
        """Prefill the tokens after the shared prefix of one group of rows: `(its KV cache, its last logits)`.

        `attention` is the group's rows in the batch's layout; the group's own layout drops the padding columns
        every row of it has (its width is its longest row). `prefix` (one row) is filled in place.
        """
        from transformers import DynamicCache

        group_width = max(len(request.prompt_ids) for request in requests) - offset
        input_ids = torch.full((len(requests), group_width), self.pad_id, dtype=torch.long)
        for i, request in enumerate(requests):
            suffix = request.prompt_ids[offset:]
            input_ids[i, group_width - len(suffix) :] = torch.tensor(list(suffix))
        attention = torch.cat([attention[:, :offset], attention[:, attention.shape[1] - group_width :]], dim=1)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, offset:]
        if prefix is None:
            cache = DynamicCache(config=self.model.config)
        else:
            cache = prefix
            cache.batch_repeat_interleave(len(requests))
        out = self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=attention,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        if cache.get_seq_length() != offset + group_width:  # an older transformers ignores `cache=`
            raise RuntimeError("The model did not fill the KV cache it was given: upgrade transformers (>= 5.24).")
        return cache, out.logits[:, -1, :].float()

    def _shared_prefix(self, requests: Sequence[GenerationRequest]) -> tuple[int, int, DynamicCache | None]:
        """The batch's common prompt prefix in whole blocks: `(length, tokens read from the cache, its KV cache)`.

        The KV cache returned is the batch's own copy (one row); `(0, 0, None)` when no block is shared. A
        prefix missing from the LRU is prefilled on top of the longest cached prefix of it and then kept.
        """
        from transformers import DynamicCache

        prompts = [request.prompt_ids for request in requests]
        # Every row keeps at least one token of its own to prefill: its logits start the answer.
        shared = min(len(prompt) for prompt in prompts) - 1
        first = prompts[0]
        for prompt in prompts[1:]:
            shared = next((i for i in range(shared) if prompt[i] != first[i]), shared)
        length = shared // PREFIX_BLOCK * PREFIX_BLOCK
        if length == 0 or self.prefix_cache_entries == 0:
            return 0, 0, None
        key = tuple(first[:length])
        found = self._prefixes.get(key)
        if found is not None:
            self._prefixes.move_to_end(key)
            return length, length, copy.deepcopy(found)
        base = max((known for known in self._prefixes if key[: len(known)] == known), key=len, default=())
        cache = copy.deepcopy(self._prefixes[base]) if base else DynamicCache(config=self.model.config)
        self.model(
            input_ids=torch.tensor([key[len(base) :]], device=self.device),
            position_ids=torch.arange(len(base), length, device=self.device).unsqueeze(0),
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        if base:
            self._prefixes.move_to_end(base)
        self._prefixes[key] = copy.deepcopy(cache)
        while len(self._prefixes) > self.prefix_cache_entries:
            self._prefixes.popitem(last=False)
        return length, len(base), cache

    def _mask(self, logits: torch.Tensor, rows: Sequence[_Row]) -> None:
        """Set the logits of tokens its grammar forbids to -inf, for every constrained row (in place)."""
        constrained = [(k, row.matcher) for k, row in enumerate(rows) if row.matcher is not None]
        if not constrained:
            return
        bitmask = llguidance.torch.allocate_token_bitmask(len(rows), self.ll_tokenizer.vocab_size)
        llguidance.torch.fill_next_token_bitmask_par(self._executor, [(m, k) for k, m in constrained], bitmask)
        index = torch.tensor([k for k, _ in constrained])
        allowed = unpack_bitmask(bitmask[index], logits.shape[-1]).to(logits.device)
        blocked = (~allowed.any(dim=-1)).nonzero().flatten().tolist()
        if blocked:
            matcher = constrained[blocked[0]][1]
            raise GrammarError(f"The grammar allows no next token ({matcher.get_error() or matcher.stop_reason()}).")
        logits[index.to(logits.device)] = logits[index.to(logits.device)].masked_fill(~allowed, float("-inf"))

    def _advance(self, row: _Row, token: int) -> bool:
        """Record a row's sampled token; True when the row has finished."""
        if token in self.stop_ids:
            row.finish_reason, row.stop_token = "stop", token
            return True
        row.tokens.append(token)
        if row.matcher is not None:
            if not row.matcher.consume_token(token):
                raise GrammarError(f"The grammar rejected a token it allowed: {row.matcher.get_error()}")
            if row.matcher.is_stopped():  # complete: only EOS could follow
                row.finish_reason = "stop"
                return True
        if row.stop:
            text = self._decode_text(row.tokens)
            cuts = [text.find(s) for s in row.stop if s in text]
            if cuts:
                row.text, row.finish_reason = text[: min(cuts)], "stop"
                return True
        if len(row.tokens) >= row.max_tokens:
            row.finish_reason = "length"
            return True
        return False


def sample(
    logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, generators: Sequence[torch.Generator]
) -> torch.Tensor:
    """One token per row: greedy where the temperature is 0, else nucleus sampling at the row's temperature.

    Args:
        logits: `(rows, vocab)` scores; -inf marks forbidden tokens.
        temperature: `(rows,)`; 0 means greedy.
        top_p: `(rows,)`; 1 keeps the whole distribution.
        generators: One random generator per row (rows of one request share theirs).

    Returns:
        `(rows,)` token ids.

    Example:
        >>> sample(torch.tensor([[0.0, 1.0]]), torch.tensor([0.0]), torch.tensor([1.0]), [torch.Generator()])
        tensor([1])
    """
    tokens = logits.argmax(dim=-1)
    sampled = (temperature > 0).nonzero().flatten().tolist()
    if not sampled:
        return tokens
    index = torch.tensor(sampled, device=logits.device)
    probs = torch.softmax(logits[index] / temperature[index, None], dim=-1)
    if bool((top_p[index] < 1).any()):
        ordered, order = probs.sort(dim=-1, descending=True)
        # Drop a token when the more likely ones already reach top_p; the most likely one always stays.
        ordered = ordered.masked_fill(ordered.cumsum(-1) - ordered > top_p[index, None], 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, ordered)
    for k, row in enumerate(sampled):
        tokens[row] = torch.multinomial(probs[k], 1, generator=generators[row])[0]
    return tokens


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """llguidance's packed bitmask (32 tokens per int32, lowest bit first) as a `(rows, vocab_size)` bool tensor.

    llguidance's own `apply_token_bitmask_inplace` is a `torch.compile` kernel, which on CPU needs a C++
    compiler and compiles at first use; unpacking with plain tensor ops needs neither.

    Args:
        bitmask: `(rows, ceil(vocab / 32))` int32, as filled by `llguidance.torch.fill_next_token_bitmask*`.
        vocab_size: Columns to return (the logits' width); tokens past the mask are not allowed.

    Returns:
        True where the token is allowed.

    Example:
        >>> unpack_bitmask(torch.tensor([[0b101]], dtype=torch.int32), 4)
        tensor([[ True, False,  True, False]])
    """
    shifts = torch.arange(32, dtype=torch.int32)
    bits = ((bitmask.unsqueeze(-1) >> shifts) & 1).bool().reshape(bitmask.shape[0], -1)
    if bits.shape[1] < vocab_size:
        bits = torch.cat([bits, bits.new_zeros((bits.shape[0], vocab_size - bits.shape[1]))], dim=1)
    return bits[:, :vocab_size]


def prefill_groups(lengths: Sequence[int], max_padding: int | None) -> list[list[int]]:
    """Rows grouped for prefill: longest first, a row joining a group while it needs at most `max_padding` pads.

    A group is padded to its longest row, so a row of length `l` in a group of width `w` costs `w - l` padding
    tokens; past `max_padding`, a forward call of its own is cheaper.

    Args:
        lengths: Tokens each row prefills.
        max_padding: Most padding tokens a row may take to join a group; None puts every row in one group, in
            input order (one prefill padded to the longest row).

    Returns:
        Row indices per group, longest rows first (ties in input order).

    Example:
        >>> prefill_groups([900, 40, 880, 30, 5], 32)
        [[0, 2], [1, 3], [4]]
        >>> prefill_groups([900, 40, 880], None)
        [[0, 1, 2]]
    """
    if max_padding is None:
        return [list(range(len(lengths)))]
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if groups and lengths[groups[-1][0]] - lengths[i] <= max_padding:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _join_caches(caches: Sequence[DynamicCache], offset: int, width: int, config: Any) -> DynamicCache:
    """Group caches (prefix, then their own width) joined into one batch of width `width` after the prefix.

    Each group's rows get zeros between the prefix and their own tokens, which the batch's attention mask hides.
    """
    from transformers import DynamicCache

    def padded(states: torch.Tensor) -> torch.Tensor:
        missing = offset + width - states.shape[2]
        pad = states.new_zeros((*states.shape[:2], missing, states.shape[3]))
        return torch.cat([states[:, :, :offset], pad, states[:, :, offset:]], dim=2)

    layers = []
    for k in range(len(caches[0].layers)):
        states = [_attention_states(cache.layers[k]) for cache in caches]
        keys = torch.cat([padded(key) for key, _ in states])
        values = torch.cat([padded(value) for _, value in states])
        layers.append((keys, values))
    return DynamicCache(layers, config=config)


class _RoomyLayer(DynamicLayer):
    """A filled attention layer's KV cache with room after it: a decode step writes its keys and values in place.

    transformers' `DynamicLayer` concatenates every step instead. `keys` and `values` are views of the filled part
    of the buffers, so everything that reads them (the attention, the sizes the mask asks for) is `DynamicLayer`'s.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int) -> None:
        super().__init__()
        self.device, self.is_initialized = keys.device, True
        self.length, self.room = keys.shape[2], room
        self._keys, self._values = self._grown(keys, self.length), self._grown(values, self.length)
        self._view()

    def _grown(self, states: torch.Tensor, needed: int) -> torch.Tensor:
        """The filled part of `states` in a new buffer with `room` tokens after `needed`."""
        buffer = states.new_empty((*states.shape[:2], needed + self.room, states.shape[3]))
        buffer[:, :, : self.length] = states[:, :, : self.length]
        return buffer

    def _view(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys, self.values = self._keys[:, :, : self.length], self._values[:, :, : self.length]
        return self.keys, self.values

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + key_states.shape[2]
        if end > self._keys.shape[2]:
            self._keys, self._values = self._grown(self._keys, end), self._grown(self._values, end)
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self.length = end
        return self._view()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._keys, self._values = self._keys[indices], self._values[indices]
        self._view()


def _reserve_room(cache: DynamicCache, room: int) -> None:
    """Give each plain attention layer of a filled cache room for `room` decode steps (`_RoomyLayer`), in place."""
    cache.layers = [
        _RoomyLayer(layer.keys, layer.values, room)
        if type(layer) is DynamicLayer and layer.keys is not None and layer.values is not None
        else layer
        for layer in cache.layers
    ]


def _attention_states(layer: object) -> tuple[torch.Tensor, torch.Tensor]:
    """A filled attention cache layer's (keys, values): the engine joins the caches of plain attention models."""
    if isinstance(layer, CacheLayerMixin) and layer.keys is not None and layer.values is not None:
        return layer.keys, layer.values
    raise TypeError(f"cannot join a {type(layer).__name__} cache layer: only filled attention layers")


def _has_sliding_layers(model: PreTrainedModel) -> bool:
    """Whether any of the model's KV cache layers keeps a sliding window instead of every position."""
    from transformers import DynamicCache

    return any(getattr(layer, "is_sliding", False) for layer in DynamicCache(config=model.config).layers)


def _stop_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """The tokens that end an answer: the generation config's EOS ids (one or a list) and the tokenizer's EOS."""
    configured = getattr(model.generation_config, "eos_token_id", None)
    ids = set(configured if isinstance(configured, list) else [] if configured is None else [configured])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    if not ids:
        raise ValueError(
            f"{model.name_or_path} defines no EOS token, so no answer could end before max_tokens: set "
            "eos_token_id in its generation_config.json or tokenizer."
        )
    return frozenset(ids)
