#!/usr/bin/env node
// llama.cpp's figures for bench/llamacpp.sh: bare llama_decode calls on a GGUF model (through
// llama_ffi.mjs), the workload bench_generate --llama-workload runs on rlcpp's engine.
//
//   node bench/anchors/llamacpp/llama_bench.mjs --model M.gguf [--threads N] [--reps 3] [--pp 256]
//        [--tg 64] [--par 8,32,64] [--par-steps 32] [--kv F32|F16] [--fa off|on|auto] [--json OUT]
//
//   pp<N>       one llama_decode of N random prompt tokens into an empty KV cache, logits of the last
//               one only: N / seconds (llama-bench's -p N)
//   tg<N>       N llama_decode calls of one token each, from an empty cache, logits every step:
//               N / seconds (llama-bench's -n N)
//   par<S>x<N>  S sequences decoding together: N llama_decode calls of S tokens (one per sequence),
//               logits for all: S * N / seconds
// No sampling: the ids are random. Each context first decodes a few untimed tokens (as
// bench_generate warms the engine up), then each measurement runs --reps times; the min, median
// and max tokens/s are printed and, with --json, written as
//   {"tests": [{"name": "pp256", "min": .., "median": .., "max": .., "runs": [..]}, ...], ...}.
// Defaults: every core, F32 KV cache, flash attention off (what bench/llamacpp.sh passes).
// Exit 2 on a bad flag or a missing install (bash bench/anchors/llamacpp/install.sh).
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {LlamaContext, systemInfo, ANCHOR_DIR} from "./llama_ffi.mjs";

const USAGE = "usage: node llama_bench.mjs --model M.gguf [--threads N] [--reps 3] [--pp 256] [--tg 64] " +
              "[--par 8,32,64] [--par-steps 32] [--kv F32|F16] [--fa off|on|auto] [--json OUT]";
const flags = {threads: String(os.availableParallelism()), reps: "3", pp: "256", tg: "64", par: "8,32,64",
               "par-steps": "32", kv: "F32", fa: "off"};
for (let i = 2; i < process.argv.length; i += 2) {
    const name = process.argv[i].replace(/^--/, "");
    if (!process.argv[i].startsWith("--") || !(name in flags || name === "model" || name === "json") ||
        process.argv[i + 1] === undefined) {
        console.error(`llama_bench.mjs: bad argument ${process.argv[i]}\n${USAGE}`);
        process.exit(2);
    }
    flags[name] = process.argv[i + 1];
}
if (!flags.model || !fs.existsSync(flags.model)) {
    console.error(`llama_bench.mjs: --model ${flags.model ?? "(none)"} is not a file\n${USAGE}`);
    process.exit(2);
}
const threads = Number(flags.threads), reps = Number(flags.reps), pp = Number(flags.pp), tg = Number(flags.tg);
const parSteps = Number(flags["par-steps"]);
const parallel = flags.par.split(",").filter(Boolean).map(Number);

// A fixed linear congruential sequence, so both rounds of a run decode the same kind of ids.
let state = 12345;
const randomId = n => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) % n;
const now = () => Number(process.hrtime.bigint()) / 1e9;

const results = {model: path.resolve(flags.model), anchor: ANCHOR_DIR, threads, reps, kv: flags.kv, fa: flags.fa,
                 node: process.version, tests: []};

function measure(name, tokens, once) {
    const runs = [];
    for (let r = 0; r < reps; r++) {
        const start = now();
        once();
        runs.push(tokens / (now() - start));
    }
    const sorted = [...runs].sort((a, b) => a - b);
    const entry = {name, min: sorted[0], median: sorted[Math.floor(sorted.length / 2)], max: sorted[sorted.length - 1], runs};
    results.tests.push(entry);
    const f = x => x.toFixed(2).padStart(8);
    console.log(`${name.padEnd(10)} tokens/s  min ${f(entry.min)}  median ${f(entry.median)}  max ${f(entry.max)}`);
}

function main() {
    results.systemInfo = systemInfo();
    console.log(`llama.cpp (node-llama-cpp 3.21.1 build): ${flags.model}, ${threads} threads, ${flags.kv} KV cache, ` +
                `flash attention ${flags.fa}, ${reps} reps`);
    const common = {threads, kvType: flags.kv, flashAttn: flags.fa};
    const ctx = new LlamaContext(flags.model, {...common, nCtx: Math.max(pp, tg) + 16, nBatch: Math.max(512, pp)});
    // Random ids below 151643: ordinary tokens of a Qwen-sized vocabulary, not control tokens.
    const vocab = Math.min(ctx.nVocab, 151643);
    results.nVocab = ctx.nVocab;
    ctx.decode(16, () => randomId(vocab), i => i, () => 0, i => i === 15);  // warm-up
    ctx.decode(1, () => randomId(vocab), () => 16, () => 0, () => true);
    if (pp > 0) {
        measure(`pp${pp}`, pp, () => {
            ctx.clear();
            ctx.decode(pp, () => randomId(vocab), i => i, () => 0, i => i === pp - 1);
            ctx.synchronize();
        });
    }
    if (tg > 0) {
        measure(`tg${tg}`, tg, () => {
            ctx.clear();
            for (let step = 0; step < tg; step++) ctx.decode(1, () => randomId(vocab), () => step, () => 0, () => true);
            ctx.synchronize();
        });
    }
    ctx.dispose();
    for (const s of parallel) {
        // n_ctx is shared by the sequences: each gets parSteps positions and some slack.
        const par = new LlamaContext(flags.model, {...common, nCtx: s * (parSteps + 16), nBatch: Math.max(512, s), nSeqMax: s});
        par.decode(s, () => randomId(vocab), () => 0, i => i, () => true);  // warm-up
        measure(`par${s}x${parSteps}`, s * parSteps, () => {
            par.clear();
            for (let step = 0; step < parSteps; step++) {
                par.decode(s, () => randomId(vocab), () => step, i => i, () => true);
            }
            par.synchronize();
        });
        par.dispose();
    }
    if (flags.json) fs.writeFileSync(flags.json, JSON.stringify(results, null, 2));
}

try {
    main();
} catch (error) {
    console.error(`llama_bench.mjs: ${error.message}`);
    process.exit(error.exitCode ?? 1);
}
