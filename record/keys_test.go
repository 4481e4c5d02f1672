package record

import (
	"testing"

	"github.com/ipfs/go-cid"
	mh "github.com/multiformats/go-multihash"
)

// Golden values computed independently of this code:
//
//	printf '%s' 'skill-org-feishu:org-data-read' | sha256sum
//	python3: 'b' + base32(0x01 0x55 0x12 0x20 ‖ digest).lower() without padding
var keyVectors = []struct {
	skill, capability, preimage, hex, cid string
}{
	{"skill-org-feishu", "org-data-read", "skill-org-feishu:org-data-read",
		"3d7cbd4b23428d9f67df5597f28f18af98cfa307bbadce8412f7b155152d782c",
		"bafkreib5ps6uwi2crwpwpx2vs7zi6gfptdh2gb53vxhiiexxwfkrkllyfq"},
	{"", "org-data-read", "*:org-data-read",
		"ec0ead0b686f207f4a2e333610c1156649e9b6a0bf194c4207d97e465a38d0b5",
		"bafkreihmb2wqw2dpeb7uulrtgyimcflgjhu3nif7dfgeeb6zpzdfuogqwu"},
	{"skill-org-feishu", Wildcard, "skill-org-feishu:*",
		"4ed7b6198b29162d1ce0cee103cf18fa718a7f00831b8b24ec3c1c5c87cc410c",
		"bafkreico263btczjcywrzygo4eb46gh2ogfh6aeddofsj3b4droiptcbbq"},
}

func TestDHTKeyVectors(t *testing.T) {
	for _, v := range keyVectors {
		k := SkillKey(v.skill, v.capability)
		if k.String() != v.preimage || k.Hex() != v.hex || k.CID().String() != v.cid {
			t.Errorf("SkillKey(%q, %q) = %s %s %s, want %s %s %s", v.skill, v.capability, k, k.Hex(), k.CID(), v.preimage, v.hex, v.cid)
		}
		c, err := cid.Decode(v.cid)
		if err != nil {
			t.Fatal(err)
		}
		p := c.Prefix()
		if p.Version != 1 || p.Codec != cid.Raw || p.MhType != mh.SHA2_256 || p.MhLength != 32 {
			t.Errorf("%s has prefix %+v", v.cid, p)
		}
		dec, err := mh.Decode(c.Hash())
		if err != nil || string(dec.Digest) != string(k.Digest[:]) {
			t.Errorf("%s does not hold the digest", v.cid)
		}
	}
	if k, ok := QueryKey("skill-org-feishu", "org-data-read"); !ok || k.Hex() != keyVectors[0].hex {
		t.Error("QueryKey with both sides is not the exact key")
	}
	if k, ok := QueryKey("", "org-data-read"); !ok || k.Hex() != keyVectors[1].hex {
		t.Error("QueryKey by capability is not the *:capability key")
	}
	if k, ok := QueryKey("skill-org-feishu", ""); !ok || k.Hex() != keyVectors[2].hex {
		t.Error("QueryKey by skill is not the skill:* key")
	}
	if _, ok := QueryKey("", ""); ok {
		t.Error("QueryKey without skill or capability")
	}
}

func TestAgentDHTKeys(t *testing.T) {
	a := sampleAgent(newKeys(t))
	var got []string
	for _, k := range a.DHTKeys() {
		got = append(got, k.String())
	}
	want := []string{
		"*:metrics", "*:org-data-read", "*:user-auth", "*:web-search",
		"skill-org-feishu:*", "skill-org-feishu:org-data-read", "skill-org-feishu:user-auth",
		"skill-search:*", "skill-search:web-search",
	}
	if len(got) != len(want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("keys %v, want %v", got, want)
		}
	}
}
