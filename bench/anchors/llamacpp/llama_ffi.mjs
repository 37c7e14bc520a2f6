// The few llama.cpp C functions the anchor needs, called through koffi on the prebuilt libraries
// that install.sh puts in LLAMA_ANCHOR_DIR (node-llama-cpp@3.21.1's platform package). Going
// under node-llama-cpp's JS API gives what the benchmark needs: bare llama_decode calls on batches
// we lay out ourselves, with the threads, KV-cache type and flash-attention setting we choose.
//
// The struct layouts below are those of include/llama.h in the llama.cpp sources node-llama-cpp
// 3.21.1 bundles (node_modules/node-llama-cpp/llama/gitRelease.bundle, release v0.4.0). To check
// them again: git clone that bundle, compile a C file printing sizeof/offsetof of the three
// structs against its include/ and ggml/include/. The installed version and these sizes and
// offsets are asserted when the library is bound: another version needs the structs read again
// from its header, never the assertion removed.
import fs from "node:fs";
import path from "node:path";
import {createRequire} from "node:module";

const PINNED = "3.21.1";
export const ANCHOR_DIR = process.env.LLAMA_ANCHOR_DIR || path.join(process.env.HOME, ".cache/rlcpp/llamacpp-anchor");
const PLATFORM = {x64: "linux-x64", arm64: "linux-arm64"}[process.arch];

// ggml_type and llama_flash_attn_type values of that header.
const GGML_TYPE = {F32: 0, F16: 1};
const FLASH_ATTN = {auto: -1, off: 0, on: 1};

function fail(message) {
    const error = new Error(message);
    error.exitCode = 2;
    throw error;
}

function installedVersion(pkg) {
    try {
        return JSON.parse(fs.readFileSync(path.join(ANCHOR_DIR, "node_modules", pkg, "package.json"), "utf8")).version;
    } catch {
        return null;
    }
}

let api = null;  // bound once per process

function bind() {
    if (api) return api;
    const binaries = `@node-llama-cpp/${PLATFORM}`;
    const version = PLATFORM && installedVersion(binaries);
    if (version !== PINNED) {
        fail(`llama.cpp ${binaries}@${PINNED} is not installed in ${ANCHOR_DIR} (found ${version ?? "nothing"}): ` +
             "run bash bench/anchors/llamacpp/install.sh");
    }
    const koffi = createRequire(path.join(ANCHOR_DIR, "package.json"))("koffi");
    const libDir = path.join(ANCHOR_DIR, "node_modules", binaries, "bins", PLATFORM);
    const find = pattern => {
        const name = fs.readdirSync(libDir).find(f => pattern.test(f));
        if (!name) fail(`${libDir} has no file matching ${pattern}: run bash bench/anchors/llamacpp/install.sh`);
        return path.join(libDir, name);
    };
    const ggml = koffi.load(find(/^libggml\.v[0-9.]*\.so$|^libggml\.so$/));
    const llama = koffi.load(find(/^libllama\.v[0-9.]*\.so$|^libllama\.so$/));

    const modelParams = koffi.struct("llama_model_params", {
        devices: "void *", tensor_buft_overrides: "void *",
        n_gpu_layers: "int32_t", split_mode: "int32_t", load_mode: "int32_t", lazy_mode: "int32_t", main_gpu: "int32_t",
        tensor_split: "void *", progress_callback: "void *", progress_callback_user_data: "void *", kv_overrides: "void *",
        vocab_only: "bool", check_tensors: "bool", use_extra_bufts: "bool", no_host: "bool", no_alloc: "bool",
        load_mtp: "bool",
    });
    const contextParams = koffi.struct("llama_context_params", {
        n_ctx: "uint32_t", n_batch: "uint32_t", n_ubatch: "uint32_t", n_seq_max: "uint32_t", n_rs_seq: "uint32_t",
        n_outputs_max: "uint32_t", n_outputs_max_per_seq: "uint32_t", n_threads: "int32_t", n_threads_batch: "int32_t",
        ctx_type: "int32_t", rope_scaling_type: "int32_t", pooling_type: "int32_t", attention_type: "int32_t",
        flash_attn_type: "int32_t",
        rope_freq_base: "float", rope_freq_scale: "float", yarn_ext_factor: "float", yarn_attn_factor: "float",
        yarn_beta_fast: "float", yarn_beta_slow: "float", yarn_orig_ctx: "uint32_t", defrag_thold: "float",
        cb_eval: "void *", cb_eval_user_data: "void *", type_k: "int32_t", type_v: "int32_t",
        abort_callback: "void *", abort_callback_data: "void *",
        embeddings: "bool", offload_kqv: "bool", no_perf: "bool", op_offload: "bool", swa_full: "bool",
        kv_unified: "bool",
        samplers: "void *", n_samplers: "size_t", ctx_other: "void *",
    });
    const batch = koffi.struct("llama_batch", {
        n_tokens: "int32_t", token: "void *", embd: "void *", pos: "void *", n_seq_id: "void *", seq_id: "void *",
        logits: "void *",
    });
    // sizeof and offsetof as the C compiler lays out llama.h 3.21.1 (x86_64 and aarch64 alike).
    const expected = [
        ["sizeof(llama_model_params)", koffi.sizeof(modelParams), 80],
        ["offsetof(llama_model_params, n_gpu_layers)", koffi.offsetof(modelParams, "n_gpu_layers"), 16],
        ["offsetof(llama_model_params, kv_overrides)", koffi.offsetof(modelParams, "kv_overrides"), 64],
        ["offsetof(llama_model_params, vocab_only)", koffi.offsetof(modelParams, "vocab_only"), 72],
        ["sizeof(llama_context_params)", koffi.sizeof(contextParams), 160],
        ["offsetof(llama_context_params, n_threads)", koffi.offsetof(contextParams, "n_threads"), 28],
        ["offsetof(llama_context_params, flash_attn_type)", koffi.offsetof(contextParams, "flash_attn_type"), 52],
        ["offsetof(llama_context_params, cb_eval)", koffi.offsetof(contextParams, "cb_eval"), 88],
        ["offsetof(llama_context_params, type_k)", koffi.offsetof(contextParams, "type_k"), 104],
        ["offsetof(llama_context_params, embeddings)", koffi.offsetof(contextParams, "embeddings"), 128],
        ["offsetof(llama_context_params, kv_unified)", koffi.offsetof(contextParams, "kv_unified"), 133],
        ["offsetof(llama_context_params, ctx_other)", koffi.offsetof(contextParams, "ctx_other"), 152],
        ["sizeof(llama_batch)", koffi.sizeof(batch), 56],
        ["offsetof(llama_batch, logits)", koffi.offsetof(batch, "logits"), 48],
    ];
    for (const [what, got, want] of expected) {
        if (got !== want) fail(`llama_ffi.mjs: ${what} is ${got}, llama.h of node-llama-cpp ${PINNED} has ${want}`);
    }

    const logCallback = koffi.proto("void llama_log_callback(int level, const char *text, void *user_data)");
    api = {
        koffi,
        loadBackends: ggml.func("void ggml_backend_load_all_from_path(const char *dir)"),
        backendInit: llama.func("void llama_backend_init(void)"),
        logSet: llama.func("void llama_log_set(llama_log_callback *callback, void *user_data)"),
        systemInfo: llama.func("const char *llama_print_system_info(void)"),
        modelDefaultParams: llama.func("llama_model_params llama_model_default_params(void)"),
        contextDefaultParams: llama.func("llama_context_params llama_context_default_params(void)"),
        modelLoad: llama.func("void *llama_model_load_from_file(const char *path, llama_model_params params)"),
        modelFree: llama.func("void llama_model_free(void *model)"),
        modelVocab: llama.func("void *llama_model_get_vocab(void *model)"),
        vocabTokens: llama.func("int32_t llama_vocab_n_tokens(void *vocab)"),
        contextInit: llama.func("void *llama_init_from_model(void *model, llama_context_params params)"),
        contextFree: llama.func("void llama_free(void *ctx)"),
        batchInit: llama.func("llama_batch llama_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max)"),
        batchFree: llama.func("void llama_batch_free(llama_batch batch)"),
        decode: llama.func("int32_t llama_decode(void *ctx, llama_batch batch)"),
        synchronize: llama.func("void llama_synchronize(void *ctx)"),
        logitsOf: llama.func("float *llama_get_logits_ith(void *ctx, int32_t i)"),
        memory: llama.func("void *llama_get_memory(void *ctx)"),
        memoryClear: llama.func("void llama_memory_clear(void *memory, bool data)"),
    };
    // Errors only (level 4 is GGML_LOG_LEVEL_ERROR; LLAMA_LOG_LEVEL=2 shows info); the callback
    // stays referenced by `api`, so it lives as long as the library may call it.
    const minLevel = Number(process.env.LLAMA_LOG_LEVEL ?? 4);
    api.log = koffi.register((level, text) => {
        if (level >= minLevel && level !== 5) process.stderr.write(`[llama.cpp] ${text}`);  // 5: continuation
    }, koffi.pointer(logCallback));
    api.logSet(api.log, null);
    api.loadBackends(libDir);  // the CPU backend variant for this CPU (ggml-cpu-<arch>.so) is chosen here
    api.backendInit();
    return api;
}

export function systemInfo() {
    return bind().systemInfo();
}

/** A model and one context on it, with a batch of batchSize tokens to fill and decode. */
export class LlamaContext {
    /**
     * @param {string} modelPath GGUF file
     * @param {object} o nCtx, nBatch, nSeqMax, threads, kvType ("F32" | "F16"), flashAttn ("auto" | "on" | "off")
     */
    constructor(modelPath, o) {
        const l = this.l = bind();
        if (!(o.kvType in GGML_TYPE)) fail(`--kv ${o.kvType}: F32 or F16`);
        if (!(o.flashAttn in FLASH_ATTN)) fail(`--fa ${o.flashAttn}: auto, on or off`);
        const mp = l.modelDefaultParams();
        mp.n_gpu_layers = 0;
        this.model = l.modelLoad(modelPath, mp);
        if (!this.model) fail(`llama.cpp could not load ${modelPath} (LLAMA_LOG_LEVEL=2 shows why)`);
        this.nVocab = l.vocabTokens(l.modelVocab(this.model));
        const cp = l.contextDefaultParams();
        cp.n_ctx = o.nCtx;
        cp.n_batch = o.nBatch;
        cp.n_ubatch = Math.min(512, o.nBatch);  // llama.cpp's default physical batch
        cp.n_seq_max = o.nSeqMax ?? 1;
        cp.n_threads = cp.n_threads_batch = o.threads;
        cp.type_k = cp.type_v = GGML_TYPE[o.kvType];
        cp.flash_attn_type = FLASH_ATTN[o.flashAttn];
        this.ctx = l.contextInit(this.model, cp);
        if (!this.ctx) fail("llama_init_from_model failed (LLAMA_LOG_LEVEL=2 shows why)");
        this.memory = l.memory(this.ctx);
        this.capacity = o.nBatch;
        this.batch = l.batchInit(this.capacity, 0, cp.n_seq_max);
        // Views of the batch's arrays, written in place before each decode.
        const k = l.koffi, b = this.batch;
        this.tokens = new Int32Array(k.view(b.token, 4 * this.capacity));
        this.positions = new Int32Array(k.view(b.pos, 4 * this.capacity));
        this.seqCounts = new Int32Array(k.view(b.n_seq_id, 4 * this.capacity));
        this.outputs = new Int8Array(k.view(b.logits, this.capacity));
        this.seqIds = k.decode(b.seq_id, "void *", this.capacity).map(p => new Int32Array(k.view(p, 4 * cp.n_seq_max)));
    }

    /** Decodes n tokens: token(i), at position pos(i), of sequence seq(i); logits where wantLogits(i). */
    decode(n, token, pos, seq, wantLogits) {
        if (n > this.capacity) fail(`a batch of ${n} tokens exceeds the context's ${this.capacity}`);
        for (let i = 0; i < n; i++) {
            this.tokens[i] = token(i);
            this.positions[i] = pos(i);
            this.seqCounts[i] = 1;
            this.seqIds[i][0] = seq(i);
            this.outputs[i] = wantLogits(i) ? 1 : 0;
        }
        const status = this.l.decode(this.ctx, {...this.batch, n_tokens: n});
        if (status !== 0) fail(`llama_decode returned ${status}`);
    }

    /** Waits for the decode's work to finish (the CPU backend is synchronous; kept for exact timing). */
    synchronize() { this.l.synchronize(this.ctx); }

    /** A copy of the logits of batch row i of the last decode: Float32Array [nVocab]. */
    logits(i) {
        const p = this.l.logitsOf(this.ctx, i);
        if (!p) fail(`no logits for batch row ${i}`);
        return new Float32Array(this.l.koffi.view(p, 4 * this.nVocab)).slice();
    }

    /** Empties the KV cache of every sequence. */
    clear() { this.l.memoryClear(this.memory, true); }

    dispose() {
        this.l.batchFree(this.batch);
        this.l.contextFree(this.ctx);
        this.l.modelFree(this.model);
    }
}
