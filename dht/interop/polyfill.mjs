// Node 20 lacks Promise.withResolvers (Node 22), which js-libp2p uses.
// Imported first by find.mjs so it exists before any libp2p module runs.
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function withResolvers () {
    let resolve, reject
    const promise = new this((res, rej) => { resolve = res; reject = rej })
    return { promise, resolve, reject }
  }
}
