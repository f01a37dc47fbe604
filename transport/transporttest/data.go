package transporttest

// JudgedData are payment data, each with "%d" where the order number
// goes, that a transport must carry to receivers byte for byte as the
// gates judged them: escapes that spell the envelope's own members, a
// negative zero, non-ASCII and line separators raw and escaped, spacing
// around the value and inside it, numbers at the edges of the decoder's
// short path and beyond a double's exact integers, members named as the
// envelope's own, and characters an encoder for HTML escapes.
var JudgedData = []string{
	`{"merchantId":"m-\u0041\"},\"sequence\":1,\"x\":{\"","orderId":"o-%d","amount":-0,"currency":"GBP","paymentToken":"tok"}`,
	` {"merchantId" : "m-é😀\u2028", "orderId":"o-%d" , "amount":123456789012345,"currency":"GBP","paymentToken":"tok"} `,
	`{"merchantId":"m","orderId":"o-%d","amount":1234567890123456,"currency":"GBP","paymentToken":"t","contractId":"ctr_x","subjectId":"s","hops":9}`,
	"\n\t{\"merchantId\":\"m\",\"orderId\":\"o-%d\",\"amount\":0.1e-5,\"currency\":\"GBP\",\"paymentToken\":\"t\",\"sequence\":1,\"acceptedAt\":\"x\"}\r\n",
	`{"merchantId":"m","orderId":"o-%d","amount":9007199254740993,"currency":"GBP","paymentToken":"t\\","n":[1,{"":null},true]}`,
	"{\"merchantId\":\"m-<&>\u2028\u2029\u007f\",\"orderId\":\"o-%d\",\"amount\":1e2,\"currency\":\"GBP\",\"paymentToken\":\"t\"}",
}
