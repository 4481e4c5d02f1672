// An independent libp2p implementation (js-libp2p) joins agentd's DHT with
// the same protocol id, finds the providers of a skill key, and fetches a
// provider's record over /agentd/record/1.0.0 using only docs/protocol.md.
//
// usage: node find.mjs <agentd multiaddr> <cid> <expected provider peer id>
// Prints one JSON line: {"providers":[...],"record":{...},"error":...}.
import './polyfill.mjs'
import { createLibp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { ping } from '@libp2p/ping'
import { kadDHT } from '@libp2p/kad-dht'
import { multiaddr } from '@multiformats/multiaddr'
import { CID } from 'multiformats/cid'
import { peerIdFromString } from '@libp2p/peer-id'
import { randomBytes, createHash, verify } from 'node:crypto'

const [addr, cidStr, want] = process.argv.slice(2)
const out = { providers: [], record: null, error: null }
const deadline = AbortSignal.timeout(30_000)

const node = await createLibp2p({
  addresses: { listen: [] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  streamMuxers: [yamux()],
  services: {
    identify: identify(),
    ping: ping(),
    dht: kadDHT({ protocol: '/agentd/kad/1.0.0', clientMode: true, peerInfoMapper: (p) => p })
  }
})

function uvarint (n) {
  const b = []
  while (n >= 0x80) { b.push((n & 0x7f) | 0x80); n = Math.floor(n / 128) }
  b.push(n)
  return Uint8Array.from(b)
}

try {
  await node.dial(multiaddr(addr), { signal: deadline })
  // Wait until the agentd node is in the routing table (identify + kad).
  for (let i = 0; i < 200 && node.services.dht.routingTable.size === 0; i++) {
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  for await (const ev of node.services.dht.findProviders(CID.parse(cidStr), { signal: deadline })) {
    if (ev.name === 'PROVIDER') {
      for (const p of ev.providers) {
        const id = p.id.toString()
        if (!out.providers.includes(id)) out.providers.push(id)
      }
    }
  }
  // Fetch the record of the expected provider: one frame each way.
  if (out.providers.includes(want)) {
    const nonce = randomBytes(32)
    const req = Buffer.from(JSON.stringify({ protocol_version: 'v1.0', nonce: nonce.toString('base64') }))
    const stream = await node.dialProtocol(peerIdFromString(want), '/agentd/record/1.0.0', { signal: deadline })
    // Read one frame: uvarint length, then that many bytes of JSON.
    let buf = Buffer.alloc(0)
    const frame = new Promise((resolve, reject) => {
      const tryParse = () => {
        let len = 0; let shift = 0; let i = 0
        for (; i < buf.length && i < 9; i++) {
          len += (buf[i] & 0x7f) * 2 ** shift; shift += 7
          if ((buf[i] & 0x80) === 0) { i++; if (buf.length >= i + len) resolve(buf.subarray(i, i + len)); return }
        }
      }
      stream.addEventListener('message', (evt) => { buf = Buffer.concat([buf, evt.data.subarray()]); tryParse() })
      stream.addEventListener('close', () => reject(new Error('stream closed before a whole frame')))
      deadline.addEventListener('abort', () => reject(new Error('timeout reading the response')))
    })
    stream.send(Buffer.concat([uvarint(req.length), req]))
    const resp = JSON.parse((await frame).toString('utf8'))
    const rec = resp.records[0]
    // The challenge the provider signed (docs/protocol.md).
    const canonical = Buffer.from(JSON.stringify(rec.announce.agent))
    // challenge = domain || nonce || requester id || responder id || SHA-256(canonical agent)
    const challenge = Buffer.concat([
      Buffer.from('agentd-record-challenge/v1\n'),
      nonce,
      node.peerId.toMultihash().bytes,
      peerIdFromString(want).toMultihash().bytes,
      createHash('sha256').update(canonical).digest()
    ])
    const pem = rec.announce.agent.public_key
    out.record = {
      agent_id: rec.announce.agent.agent_id,
      peer_id: rec.announce.agent.peer_id,
      signer: rec.signer,
      // SHA256withECDSA, DER: the record signature over the canonical agent
      // object, and the challenge signature over our nonce.
      signature_ok: verify('sha256', canonical, { key: pem, dsaEncoding: 'der' }, Buffer.from(rec.announce.signature, 'base64')),
      challenge_ok: rec.signer === 'agent' &&
        verify('sha256', challenge, { key: pem, dsaEncoding: 'der' }, Buffer.from(rec.challenge_signature, 'base64'))
    }
  }
} catch (err) {
  out.error = String(err && err.stack || err)
}
console.log(JSON.stringify(out))
await node.stop()
process.exit(0)
