// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// tests/node/kafka_read.mjs - reads topics end to end with kafkajs, the
// most used Kafka client that shares no code with librdkafka, and prints
// each message as one JSON line in kcat's -J envelope shape (topic,
// partition, offset, key, payload), so tests/integration/kafka_lib.sh's
// kafka_compare reads it as it reads kcat's.
//
//   node kafka_read.mjs BROKERS TOPIC... [--lz4] [--group ID]
//
// --lz4 registers an LZ4 codec built on lz4js (pure JavaScript, from npm):
// kafkajs ships gzip only and fails on LZ4 batches without a codec. The
// codec is what a kafkajs user adds (docs/operations.md, "Consumers").
// Reads from the earliest offset until every partition reaches the high
// watermark it had at the start. Exit 0; 1 with the error on stderr.
import kafkajs from "kafkajs";
import lz4 from "lz4js";

const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = kafkajs;
const args = process.argv.slice(2);
const useLz4 = args.includes("--lz4");
const gi = args.indexOf("--group");
const group = gi >= 0 ? args[gi + 1] : `kafkajs-test-${process.pid}`;
const pos = args.filter((a, i) => !a.startsWith("--") && !(gi >= 0 && i === gi + 1));
const [brokers, ...topics] = pos;
if (!brokers || topics.length === 0) {
	console.error("usage: kafka_read.mjs BROKERS TOPIC... [--lz4] [--group ID]");
	process.exit(2);
}

if (useLz4) {
	// Kafka's LZ4 is the LZ4 frame format (KIP-57); lz4js reads and writes it
	CompressionCodecs[CompressionTypes.LZ4] = () => ({
		async compress(encoder) {
			return Buffer.from(lz4.compress(encoder.buffer));
		},
		async decompress(buffer) {
			return Buffer.from(lz4.decompress(buffer));
		},
	});
}

const kafka = new Kafka({
	clientId: "infertrace-kafkajs-test",
	brokers: brokers.split(","),
	logLevel: logLevel.ERROR,
	retry: { retries: 3 },
});

const fail = (e) => {
	console.error(`kafkajs: ${e?.name ?? "error"}: ${e?.message ?? e}`);
	process.exit(1);
};
const watchdog = setTimeout(() => fail(new Error("timed out after 60 s")), 60000);

try {
	const admin = kafka.admin();
	await admin.connect();
	// what is there now: consume until each partition's high watermark
	const left = new Map();
	for (const t of topics) {
		for (const p of await admin.fetchTopicOffsets(t)) {
			const high = BigInt(p.high), low = BigInt(p.low);
			if (high > low) left.set(`${t}/${p.partition}`, high);
		}
	}
	await admin.disconnect();
	const out = [];
	if (left.size > 0) {
		const consumer = kafka.consumer({ groupId: group, retry: { retries: 3 } });
		consumer.on(consumer.events.CRASH, (e) => fail(e.payload.error));
		await consumer.connect();
		for (const t of topics) await consumer.subscribe({ topic: t, fromBeginning: true });
		let done;
		const finished = new Promise((r) => (done = r));
		await consumer.run({
			autoCommit: false,
			eachMessage: async ({ topic, partition, message }) => {
				out.push(JSON.stringify({
					topic, partition, offset: Number(message.offset),
					key: message.key === null ? null : message.key.toString("utf8"),
					payload: message.value === null ? null : message.value.toString("utf8"),
				}));
				const k = `${topic}/${partition}`;
				if (left.has(k) && BigInt(message.offset) + 1n >= left.get(k)) {
					left.delete(k);
					if (left.size === 0) done();
				}
			},
		});
		await finished;
		await consumer.disconnect();
	}
	clearTimeout(watchdog);
	if (out.length) process.stdout.write(out.join("\n") + "\n");
} catch (e) {
	fail(e);
}
