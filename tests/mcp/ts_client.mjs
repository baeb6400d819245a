// Drives an executa plugin in MCP mode with the official MCP TypeScript SDK's client
// (`Client` + `StdioClientTransport`) and prints one JSON report of what it saw:
//
//   node ts_client.mjs --sdk DIR [--calls N] [--steps S] -- CMD ARGS...
//
// DIR is where tests/mcp/node.sh installed the SDK (its node_modules). The report says, for
// each of N sequential `progress` calls of S steps, how many progress notifications the
// client's `onprogress` received: the SDK 1.x drops those that arrive in the same read as
// their call's reply (typescript-sdk #2580), and the Rust test (tests/plugin_mcp_ts.rs)
// asserts that none was dropped. Every step runs under a timeout, and the whole run under
// an overall one, so a hang is a failure with a message, never a stuck test.

import { createRequire } from 'node:module';
import { resolve } from 'node:path';

const STEP_TIMEOUT_MS = 30_000;
const OVERALL_TIMEOUT_MS = 240_000;

function parseArgs(argv) {
    const opts = { sdk: null, calls: 20, steps: 3, command: null, args: [] };
    const dash = argv.indexOf('--');
    if (dash < 0 || dash + 1 >= argv.length) {
        throw new Error('usage: ts_client.mjs --sdk DIR [--calls N] [--steps S] -- CMD ARGS...');
    }
    const own = argv.slice(0, dash);
    for (let i = 0; i < own.length; i += 2) {
        const [flag, value] = [own[i], own[i + 1]];
        if (value === undefined) throw new Error(`${flag} needs a value`);
        if (flag === '--sdk') opts.sdk = value;
        else if (flag === '--calls') opts.calls = Number(value);
        else if (flag === '--steps') opts.steps = Number(value);
        else throw new Error(`unknown option ${flag}`);
    }
    if (!opts.sdk) throw new Error('--sdk DIR is required');
    [opts.command, ...opts.args] = argv.slice(dash + 1);
    return opts;
}

// Rejects with a message naming the step when `promise` takes longer than `ms`.
function withTimeout(promise, label, ms = STEP_TIMEOUT_MS) {
    let timer;
    const timeout = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${label}`)), ms);
    });
    return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function textOf(result) {
    return (result.content ?? [])
        .filter((b) => b.type === 'text')
        .map((b) => b.text)
        .join('\n');
}

function callReport(result) {
    return {
        is_error: result.isError ?? false,
        text: textOf(result),
        structured: result.structuredContent ?? null,
    };
}

function median(values) {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted.length ? sorted[Math.floor(sorted.length / 2)] : null;
}

async function expectError(promise) {
    try {
        await promise;
    } catch (e) {
        return { code: e.code ?? null, message: String(e.message ?? e) };
    }
    return null;
}

async function scenario(opts, sdk) {
    const { Client, StdioClientTransport, CreateMessageRequestSchema } = sdk;
    const report = { errors: [] };
    const transport = new StdioClientTransport({
        command: opts.command,
        args: opts.args,
        stderr: 'inherit',
    });
    const client = new Client(
        { name: 'executa-ts-test', version: '0' },
        { capabilities: { sampling: {} } },
    );
    // Where the SDK reports what it dropped ("unknown token" progress, among others).
    client.onerror = (e) => report.errors.push(String(e?.message ?? e));
    client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
        const asked = request.params.messages
            .filter((m) => m.content?.type === 'text')
            .map((m) => `${m.role}:${m.content.text}`)
            .join(' | ');
        return {
            role: 'assistant',
            content: { type: 'text', text: `sampled[${asked}] max=${request.params.maxTokens}` },
            model: 'ts-sdk-test-model',
            stopReason: 'endTurn',
        };
    });
    const request = { timeout: STEP_TIMEOUT_MS };
    const call = (name, args, extra = {}) =>
        withTimeout(
            client.callTool({ name, arguments: args }, undefined, { ...request, ...extra }),
            `tools/call ${name}`,
        );

    await withTimeout(client.connect(transport, request), 'connect (initialize)');
    report.server_name = client.getServerVersion()?.name ?? null;
    report.has_tools_capability = client.getServerCapabilities()?.tools !== undefined;

    const listed = await withTimeout(client.listTools(undefined, request), 'tools/list');
    report.tools = listed.tools.map((t) => t.name).sort();

    report.echo = callReport(await call('echo', { text: 'hi', n: 3 }));
    report.fail = callReport(await call('fail', { message: 'no luck' }));
    report.sleep = callReport(await call('sleep', { ms: 20 }));
    report.sample = callReport(await call('sample', { prompt: 'name a colour', max_tokens: 16 }));
    report.unknown_tool = await expectError(call('no_such_tool', {}));

    report.progress = [];
    for (let i = 0; i < opts.calls; i++) {
        const seen = [];
        const started = performance.now();
        const result = await call(
            'progress',
            { steps: opts.steps },
            { onprogress: (p) => seen.push(p.progress) },
        );
        const ms = performance.now() - started;
        report.progress.push({ received: seen, result: callReport(result).structured, ms });
    }
    const expected = opts.steps * opts.calls;
    const received = report.progress.reduce((n, c) => n + c.received.length, 0);
    report.progress_summary = {
        calls: opts.calls,
        steps: opts.steps,
        expected,
        received,
        lost: expected - received,
        calls_losing_events: report.progress.filter((c) => c.received.length < opts.steps).length,
        // How long a call took, request to result (for the figures; never asserted).
        median_call_ms: median(report.progress.map((c) => c.ms)),
    };

    await withTimeout(client.close(), 'close');
    report.closed = true;
    return report;
}

async function main() {
    const opts = parseArgs(process.argv.slice(2));
    // The SDK lives in the install directory, not beside this file: resolve it from there.
    const require = createRequire(resolve(opts.sdk, 'package.json'));
    const sdk = {
        ...require('@modelcontextprotocol/sdk/client/index.js'),
        ...require('@modelcontextprotocol/sdk/client/stdio.js'),
        ...require('@modelcontextprotocol/sdk/types.js'),
    };
    const report = await withTimeout(scenario(opts, sdk), 'the whole run', OVERALL_TIMEOUT_MS);
    process.stdout.write(`${JSON.stringify(report)}\n`);
}

main().then(
    () => process.exit(0),
    (e) => {
        process.stderr.write(`ts_client.mjs failed: ${e?.stack ?? e}\n`);
        process.exit(1);
    },
);
