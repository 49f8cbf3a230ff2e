-- xdpndk.lua: a Wireshark dissector for the xdpndk wire protocol, version 1.
--
-- docs/PROTOCOL.md of the xdpndk repository is the specification this follows section by
-- section; transport/wire is the Go implementation. Load it with
--
--     tshark -X lua_script:contrib/wireshark/xdpndk.lua -r capture.pcapng
--
-- or copy it into Wireshark's personal Lua plugin folder (contrib/wireshark/README.md).
-- It decodes every header field and extension, the entries of a Bundle (and the groups of
-- entries of a multi-QP Bundle, each by its QPN and cookie), the connection-management
-- messages with their private data, verifies the CRC32C trailer, and
-- flags (expert info, "malformed") every datagram that a receiver's wire.Parse would drop,
-- with the check it fails. It never raises a Lua error on any input: every read is bounded
-- by the bytes captured.
--
-- It runs on the Lua 5.2 of Wireshark up to 4.2 and on the Lua 5.3 or 5.4 of 4.4 and later.
--
-- SPDX-License-Identifier: MIT

local xdpndk = Proto("xdpndk", "xdpndk transport (RDMA verbs over UDP)")

local DEFAULT_PORT = 4793 -- xdp.DefaultPort

---------------------------------------------------------------------------------------------
-- 32-bit operations on every Lua Wireshark embeds: Lua's own operators on 5.3 and later
-- (Wireshark 4.4 on), compiled at run time so that this file still parses under 5.1 and
-- 5.2; bit32 on 5.2; LuaBitOp's "bit", which every Wireshark bundles (its results are
-- signed, hence u32 below), on 5.1.

local band, bxor, rshift
if _VERSION ~= "Lua 5.1" and _VERSION ~= "Lua 5.2" then
    band, bxor, rshift = load([[return function(a, b) return a & b end,
        function(a, b) return a ~ b end,
        function(a, n) return (a & 0xFFFFFFFF) >> n end]])()
elseif bit32 then
    band, bxor, rshift = bit32.band, bit32.bxor, bit32.rshift
else
    band, bxor, rshift = bit.band, bit.bxor, bit.rshift
end

local TWO32 = 4294967296

-- u32 maps a result of the operations above to [0, 2^32).
local function u32(x) return x % TWO32 end

---------------------------------------------------------------------------------------------
-- CRC-32C (Castagnoli): polynomial 0x1EDC6F41, reflected (0x82F63B78), initial value and
-- final XOR 0xFFFFFFFF (docs/PROTOCOL.md §8).

local CRC_TABLE = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if band(c, 1) ~= 0 then
            c = bxor(rshift(c, 1), 0x82F63B78)
        else
            c = rshift(c, 1)
        end
    end
    CRC_TABLE[i] = c
end

-- crc32c returns the CRC-32C of the Lua string s.
local function crc32c(s)
    local c = 0xFFFFFFFF
    local n = #s
    local i = 1
    while i <= n do
        local j = i + 63
        if j > n then j = n end
        local bytes = { s:byte(i, j) }
        for k = 1, #bytes do
            c = bxor(rshift(c, 8), CRC_TABLE[band(bxor(c, bytes[k]), 0xFF)])
        end
        i = j + 1
    end
    return u32(bxor(c, 0xFFFFFFFF))
end

-- The check values of §8: if the implementation disagrees, no trailer is called good or bad.
local CRC_SELF_CHECK = crc32c("123456789") == 0xE3069283 and crc32c(string.rep("\0", 32)) == 0x8A9136AA

---------------------------------------------------------------------------------------------
-- The protocol's tables (transport/wire/types.go, packet.go).

local HEADER_LEN, TRAILER_LEN = 24, 4
local ACKEXT_LEN, CMEXT_LEN, ENTRY_HEADER_LEN, GROUP_HEADER_LEN = 44, 42, 8, 16
local MAX_PRIVATE_DATA = 196
local MAX_SEND_TOTAL = 2147483648 -- 2^31

local FLAG_ACKREQ, FLAG_SOLICITED, FLAG_LAST, FLAG_RETRANSMIT, FLAG_ACK = 0x01, 0x02, 0x04, 0x08, 0x10
local FLAG_NAMES = {
    { FLAG_ACKREQ, "AckReq" }, { FLAG_SOLICITED, "Solicited" }, { FLAG_LAST, "Last" },
    { FLAG_RETRANSMIT, "Retransmit" }, { FLAG_ACK, "Ack" },
}
local FLAGS_DATA = FLAG_ACKREQ + FLAG_RETRANSMIT + FLAG_ACK
local FLAGS_SEND_LAST = FLAGS_DATA + FLAG_SOLICITED
local FLAGS_LAST = FLAGS_DATA + FLAG_LAST

-- OPS: per opcode its name, kind, extension length and allowed flags (table 5).
local OPS = {
    [0x01] = { name = "SendFirst", kind = "send", ext = 16, flags = FLAGS_DATA },
    [0x02] = { name = "SendMiddle", kind = "send", ext = 16, flags = FLAGS_DATA },
    [0x03] = { name = "SendLast", kind = "send", ext = 16, flags = FLAGS_SEND_LAST },
    [0x04] = { name = "SendOnly", kind = "send", ext = 16, flags = FLAGS_SEND_LAST },
    [0x05] = { name = "SendLastInv", kind = "send", ext = 16, flags = FLAGS_SEND_LAST },
    [0x06] = { name = "SendOnlyInv", kind = "send", ext = 16, flags = FLAGS_SEND_LAST },
    [0x10] = { name = "Write", kind = "write", ext = 20, flags = FLAGS_LAST },
    [0x20] = { name = "ReadRequest", kind = "readreq", ext = 20, flags = FLAGS_DATA },
    [0x21] = { name = "ReadResponse", kind = "readresp", ext = 8, flags = FLAGS_LAST },
    [0x30] = { name = "Ack", kind = "ack", ext = ACKEXT_LEN, flags = FLAG_ACKREQ },
    [0x40] = { name = "ConnRequest", kind = "cm", ext = CMEXT_LEN, flags = FLAG_RETRANSMIT },
    [0x41] = { name = "ConnReply", kind = "cm", ext = CMEXT_LEN, flags = FLAG_RETRANSMIT },
    [0x42] = { name = "ReadyToUse", kind = "cm", ext = CMEXT_LEN, flags = FLAG_RETRANSMIT },
    [0x43] = { name = "ConnReject", kind = "cm", ext = CMEXT_LEN, flags = FLAG_RETRANSMIT },
    [0x44] = { name = "DisconnectReq", kind = "cm", ext = CMEXT_LEN, flags = FLAG_RETRANSMIT },
    [0x45] = { name = "DisconnectRep", kind = "cm", ext = CMEXT_LEN, flags = FLAG_RETRANSMIT },
    [0x50] = { name = "Bundle", kind = "bundle", ext = 0, flags = 0 },
    [0x51] = { name = "MultiBundle", kind = "multibundle", ext = 0, flags = 0 },
}
local OPCODE_NAMES = {}
for code, op in pairs(OPS) do OPCODE_NAMES[code] = op.name end

local function is_data(op) return op.kind == "send" or op.kind == "write" or op.kind == "readreq" or op.kind == "readresp" end

local SYNDROME_NAMES = {
    [0] = "Ack", [1] = "NakSeq", [2] = "NakRNR", [3] = "NakAccess", [4] = "NakInvalid",
    [5] = "NakRemoteOp", [6] = "NakInvalToken",
}
local SYN_NAK_RNR = 2

local REASON_NAMES = {
    [1] = "rejected by the peer's application, or the attempt abandoned",
    [2] = "nothing listens on the service",
    [3] = "the listener's backlog is full",
    [4] = "the request waited too long for Accept or Reject",
    [5] = "the request asks for something the listener cannot do",
    [6] = "a field of the request (or of the reply) is out of range",
}

local CRC_STATUS = { [0] = "Bad", [1] = "Good", [2] = "Unverified" }

---------------------------------------------------------------------------------------------
-- Fields. Data packets inside a Bundle use the same fields as on their own, so that a filter
-- such as xdpndk.opcode == 0x10 or xdpndk.rdma.length > 4096 finds bundled ones too.

local f = {
    length = ProtoField.uint32("xdpndk.length", "Datagram length", base.DEC),
    header = ProtoField.none("xdpndk.header", "Header"),
    version = ProtoField.uint8("xdpndk.version", "Version", base.DEC),
    opcode = ProtoField.uint8("xdpndk.opcode", "Opcode", base.HEX, OPCODE_NAMES),
    flags = ProtoField.uint16("xdpndk.flags", "Flags", base.HEX),
    flag_ackreq = ProtoField.bool("xdpndk.flags.ackreq", "AckReq", 16, nil, 0x0001,
        "acknowledge promptly; on an Ack: a probe"),
    flag_solicited = ProtoField.bool("xdpndk.flags.solicited", "Solicited", 16, nil, 0x0002,
        "last packet of a Send that solicits an event"),
    flag_last = ProtoField.bool("xdpndk.flags.last", "Last", 16, nil, 0x0004,
        "last packet of a Write or ReadResponse"),
    flag_retransmit = ProtoField.bool("xdpndk.flags.retransmit", "Retransmit", 16, nil, 0x0008,
        "a retransmission (no RTT sample)"),
    flag_ack = ProtoField.bool("xdpndk.flags.ack", "Ack", 16, nil, 0x0010,
        "a piggybacked AckExt follows the extension"),
    flag_reserved = ProtoField.uint16("xdpndk.flags.reserved", "Reserved", base.HEX, nil, 0xFFE0,
        "must be 0"),
    dest_qpn = ProtoField.uint32("xdpndk.dest_qpn", "Destination QPN", base.DEC),
    psn = ProtoField.uint32("xdpndk.psn", "PSN", base.DEC),
    cookie = ProtoField.uint64("xdpndk.cookie", "Cookie", base.HEX),
    ts = ProtoField.uint32("xdpndk.ts", "Timestamp (us)", base.DEC),

    send = ProtoField.none("xdpndk.send", "SendExt"),
    send_msn = ProtoField.uint32("xdpndk.send.msn", "MSN", base.DEC),
    send_offset = ProtoField.uint32("xdpndk.send.offset", "Offset", base.DEC),
    send_total = ProtoField.uint32("xdpndk.send.total", "Total", base.DEC),
    send_inv_token = ProtoField.uint32("xdpndk.send.inv_token", "Invalidate Token", base.HEX),

    rdma = ProtoField.none("xdpndk.rdma", "RDMAExt"),
    rdma_addr = ProtoField.uint64("xdpndk.rdma.addr", "Remote Address", base.HEX),
    rdma_token = ProtoField.uint32("xdpndk.rdma.token", "Remote Token", base.HEX),
    rdma_length = ProtoField.uint32("xdpndk.rdma.length", "Length", base.DEC),
    rdma_offset = ProtoField.uint32("xdpndk.rdma.offset", "Offset", base.DEC),

    readresp = ProtoField.none("xdpndk.readresp", "ReadRespExt"),
    rr_req_psn = ProtoField.uint32("xdpndk.readresp.req_psn", "Request PSN", base.DEC),
    rr_offset = ProtoField.uint32("xdpndk.readresp.offset", "Offset", base.DEC),

    ack = ProtoField.none("xdpndk.ack", "AckExt"),
    ack_piggybacked = ProtoField.bool("xdpndk.ack.piggybacked", "Piggybacked on a data packet"),
    ack_psn = ProtoField.uint32("xdpndk.ack.psn", "AckPSN", base.DEC),
    ack_sack = ProtoField.uint64("xdpndk.ack.sack", "SACK", base.HEX),
    ack_sack_psn = ProtoField.uint32("xdpndk.ack.sack_psn", "SACKed PSN", base.DEC),
    ack_credits = ProtoField.uint32("xdpndk.ack.credits", "Credits (MSN limit)", base.DEC),
    ack_syndrome = ProtoField.uint8("xdpndk.ack.syndrome", "Syndrome", base.DEC, SYNDROME_NAMES),
    ack_reserved = ProtoField.uint8("xdpndk.ack.reserved", "Reserved", base.HEX),
    ack_value = ProtoField.uint16("xdpndk.ack.value", "Value", base.DEC),
    ack_rnr_delay = ProtoField.uint32("xdpndk.ack.rnr_delay", "RNR retry delay (us)", base.DEC),
    ack_nak_psn = ProtoField.uint32("xdpndk.ack.nak_psn", "NakPSN", base.DEC),
    ack_echo_ts = ProtoField.uint32("xdpndk.ack.echo_ts", "EchoTS (us)", base.DEC),
    ack_delay = ProtoField.uint32("xdpndk.ack.delay", "Delay (us)", base.DEC),
    ack_high_psn = ProtoField.uint32("xdpndk.ack.high_psn", "HighPSN", base.DEC),
    ack_high_sack = ProtoField.uint64("xdpndk.ack.high_sack", "HighSACK", base.HEX),
    ack_high_sack_psn = ProtoField.uint32("xdpndk.ack.high_sack_psn", "HighSACKed PSN", base.DEC),

    cm = ProtoField.none("xdpndk.cm", "CMExt"),
    cm_service_id = ProtoField.uint64("xdpndk.cm.service_id", "Service ID", base.DEC),
    cm_conn_id = ProtoField.uint64("xdpndk.cm.conn_id", "Connection ID", base.HEX),
    cm_src_qpn = ProtoField.uint32("xdpndk.cm.src_qpn", "Source QPN", base.DEC),
    cm_initial_psn = ProtoField.uint32("xdpndk.cm.initial_psn", "Initial PSN", base.DEC),
    cm_cookie = ProtoField.uint64("xdpndk.cm.cookie", "Cookie", base.HEX),
    cm_max_payload = ProtoField.uint16("xdpndk.cm.max_payload", "MaxPayload", base.DEC),
    cm_ird = ProtoField.uint8("xdpndk.cm.ird", "IRD", base.DEC),
    cm_ord = ProtoField.uint8("xdpndk.cm.ord", "ORD", base.DEC),
    cm_data_port = ProtoField.uint16("xdpndk.cm.data_port", "DataPort", base.DEC),
    cm_reason = ProtoField.uint16("xdpndk.cm.reason", "Reason", base.DEC, REASON_NAMES),
    cm_private_len = ProtoField.uint16("xdpndk.cm.private_len", "PrivateLen", base.DEC),
    cm_private_data = ProtoField.bytes("xdpndk.cm.private_data", "Private data"),

    bundle_entries = ProtoField.uint32("xdpndk.bundle.entries", "Entries", base.DEC),
    bundle_groups = ProtoField.uint32("xdpndk.bundle.groups", "Groups", base.DEC),
    group = ProtoField.none("xdpndk.group", "Group"),
    group_index = ProtoField.uint32("xdpndk.group.index", "Group number", base.DEC),
    group_source_port = ProtoField.uint16("xdpndk.group.source_port", "Source port", base.DEC),
    group_count = ProtoField.uint16("xdpndk.group.count", "Count", base.DEC),
    entry = ProtoField.none("xdpndk.entry", "Entry"),
    entry_index = ProtoField.uint32("xdpndk.entry.index", "Entry number", base.DEC),
    entry_length = ProtoField.uint16("xdpndk.entry.length", "Length", base.DEC),

    payload = ProtoField.bytes("xdpndk.payload", "Payload"),
    payload_len = ProtoField.uint32("xdpndk.payload_len", "Payload length", base.DEC),

    crc = ProtoField.uint32("xdpndk.crc", "CRC32C", base.HEX),
    crc_computed = ProtoField.uint32("xdpndk.crc.computed", "Computed CRC32C", base.HEX),
    crc_status = ProtoField.uint8("xdpndk.crc.status", "CRC32C status", base.DEC, CRC_STATUS),
}
local field_list = {}
for _, v in pairs(f) do field_list[#field_list + 1] = v end
xdpndk.fields = field_list

local ef = {
    malformed = ProtoExpert.new("xdpndk.malformed", "Malformed xdpndk datagram",
        expert.group.MALFORMED, expert.severity.ERROR),
    crc_bad = ProtoExpert.new("xdpndk.crc.bad", "Bad CRC32C trailer",
        expert.group.CHECKSUM, expert.severity.ERROR),
    crc_unverified = ProtoExpert.new("xdpndk.crc.unverified", "CRC32C not verified",
        expert.group.CHECKSUM, expert.severity.NOTE),
    truncated = ProtoExpert.new("xdpndk.truncated", "Datagram not captured whole",
        expert.group.UNDECODED, expert.severity.WARN),
    nak = ProtoExpert.new("xdpndk.nak", "Negative acknowledgement",
        expert.group.RESPONSE_CODE, expert.severity.WARN),
    reject = ProtoExpert.new("xdpndk.reject", "Connection rejected",
        expert.group.RESPONSE_CODE, expert.severity.NOTE),
    retransmit = ProtoExpert.new("xdpndk.retransmit", "Retransmission",
        expert.group.SEQUENCE, expert.severity.NOTE),
}
xdpndk.experts = { ef.malformed, ef.crc_bad, ef.crc_unverified, ef.truncated, ef.nak, ef.reject, ef.retransmit }

xdpndk.prefs.port = Pref.uint("UDP port", DEFAULT_PORT,
    "The UDP port xdpndk endpoints receive on (xdp.Config.Port; 4793 by default). 0: none, the heuristic alone.")
xdpndk.prefs.heuristic = Pref.bool("Find datagrams on other ports", true,
    "Decode a UDP datagram on any port as xdpndk when it is version 1, has a defined opcode and its CRC32C trailer matches")
xdpndk.prefs.check_crc = Pref.bool("Verify the CRC32C trailer", true,
    "Compute the CRC-32C of every datagram and compare it with its trailer")

---------------------------------------------------------------------------------------------
-- Helpers.

local function hex64(tvb, o)
    return string.format("0x%08x%08x", tvb(o, 4):uint(), tvb(o + 4, 4):uint())
end

local function is_zero64(tvb, o) return tvb(o, 4):uint() == 0 and tvb(o + 4, 4):uint() == 0 end

-- flag_names lists the names of the flags set in fl, and any other bit as hex.
local function flag_names(fl)
    local names, rest = {}, fl
    for _, d in ipairs(FLAG_NAMES) do
        if band(fl, d[1]) ~= 0 then
            names[#names + 1] = d[2]
            rest = rest - d[1]
        end
    end
    if rest ~= 0 then names[#names + 1] = string.format("0x%x", rest) end
    return table.concat(names, ",")
end

-- bitmap_psns returns the PSNs a 64-bit bitmap (hi, lo: its big-endian halves) names, bit i
-- (value 2^i) naming base + step*i (mod 2^32), in bit order.
local function bitmap_psns(hi, lo, base, step)
    local out = {}
    for i = 0, 63 do
        local word, b = lo, i
        if i >= 32 then word, b = hi, i - 32 end
        if band(rshift(word, b), 1) ~= 0 then
            out[#out + 1] = (base + step * i) % TWO32
        end
    end
    return out
end

-- ranges prints a list of PSNs as runs: "5-8,10".
local function ranges(psns)
    local parts, i = {}, 1
    while i <= #psns do
        local j = i
        while j < #psns and (psns[j + 1] - psns[j]) % TWO32 == 1 do j = j + 1 end
        if j > i then
            parts[#parts + 1] = psns[i] .. "-" .. psns[j]
        else
            parts[#parts + 1] = tostring(psns[i])
        end
        i = j + 1
    end
    return table.concat(parts, ",")
end

-- A packet's state while it is dissected: the problems found (for the Info column).
local function new_state() return { problems = {} } end

-- bad flags item (or the tree) as malformed, with the check it fails.
local function bad(st, item, msg)
    item:add_proto_expert_info(ef.malformed, msg)
    st.problems[#st.problems + 1] = msg
end

-- add_flags adds a flags value fl, read from range r (2 bytes in a header, 1 in an entry),
-- with every bit by name.
local function add_flags(tree, r, fl)
    local item = tree:add(f.flags, r, fl)
    local names = flag_names(fl)
    if names ~= "" then item:append_text(" (" .. names .. ")") end
    item:add(f.flag_ackreq, r, fl)
    item:add(f.flag_solicited, r, fl)
    item:add(f.flag_last, r, fl)
    item:add(f.flag_retransmit, r, fl)
    item:add(f.flag_ack, r, fl)
    item:add(f.flag_reserved, r, fl)
    return item
end

-- check_flags marks flags outside the opcode's allowed set.
local function check_flags(st, item, op, fl)
    local extra = fl - band(fl, op.flags)
    if extra ~= 0 then
        bad(st, item, string.format("flags 0x%04x not allowed on %s (allowed: %s)", extra, op.name,
            op.flags == 0 and "none" or flag_names(op.flags)))
    end
end

---------------------------------------------------------------------------------------------
-- Extensions.

-- dissect_ackext adds the AckExt at o (44 bytes, present) and returns its summary.
local function dissect_ackext(tvb, tree, st, o, piggybacked)
    local t = tree:add(f.ack, tvb(o, ACKEXT_LEN))
    if piggybacked then t:add(f.ack_piggybacked, true):set_generated() end
    local ackpsn = tvb(o, 4):uint()
    local sack_hi, sack_lo = tvb(o + 4, 4):uint(), tvb(o + 8, 4):uint()
    local credits = tvb(o + 12, 4):uint()
    local syn = tvb(o + 16, 1):uint()
    local reserved = tvb(o + 17, 1):uint()
    local value = tvb(o + 18, 2):uint()
    local nakpsn = tvb(o + 20, 4):uint()
    local high = tvb(o + 32, 4):uint()
    local hs_hi, hs_lo = tvb(o + 36, 4):uint(), tvb(o + 40, 4):uint()

    t:add(f.ack_psn, tvb(o, 4))
    local sacked = bitmap_psns(sack_hi, sack_lo, (ackpsn + 1) % TWO32, 1)
    local si = t:add(f.ack_sack, tvb(o + 4, 8))
    if #sacked > 0 then si:append_text(" (PSNs " .. ranges(sacked) .. ")") end
    for _, p in ipairs(sacked) do si:add(f.ack_sack_psn, tvb(o + 4, 8), p):set_generated() end
    t:add(f.ack_credits, tvb(o + 12, 4))
    local syn_item = t:add(f.ack_syndrome, tvb(o + 16, 1))
    local ri = t:add(f.ack_reserved, tvb(o + 17, 1))
    local vi = t:add(f.ack_value, tvb(o + 18, 2))
    if syn == SYN_NAK_RNR then
        vi:append_text(string.format(" (retry after %d us)", value * 16))
        vi:add(f.ack_rnr_delay, tvb(o + 18, 2), value * 16):set_generated()
    end
    t:add(f.ack_nak_psn, tvb(o + 20, 4))
    t:add(f.ack_echo_ts, tvb(o + 24, 4))
    t:add(f.ack_delay, tvb(o + 28, 4))
    t:add(f.ack_high_psn, tvb(o + 32, 4))
    local highs = bitmap_psns(hs_hi, hs_lo, (high - 1) % TWO32, -1)
    local hi_item = t:add(f.ack_high_sack, tvb(o + 36, 8))
    if #highs > 0 then
        -- Listed in PSN order, the way the first block is.
        local asc = {}
        for i = #highs, 1, -1 do asc[#asc + 1] = highs[i] end
        hi_item:append_text(" (PSNs " .. ranges(asc) .. ")")
    end
    for _, p in ipairs(highs) do hi_item:add(f.ack_high_sack_psn, tvb(o + 36, 8), p):set_generated() end

    -- Checks (§9: syndrome known, reserved 0; on data packets a positive ack only).
    if syn > 6 then bad(st, syn_item, string.format("syndrome %d is not defined (0-6)", syn)) end
    if reserved ~= 0 then bad(st, ri, "AckExt reserved byte is not 0") end
    if piggybacked and syn ~= 0 then
        bad(st, syn_item, "a piggybacked AckExt must be a positive ack (syndrome 0)")
    end

    local s
    if syn == 0 then
        s = "Ack " .. ackpsn
    else
        s = (SYNDROME_NAMES[syn] or ("Syndrome " .. syn)) .. " PSN " .. nakpsn
        if syn == SYN_NAK_RNR then s = s .. string.format(" (retry after %d us)", value * 16) end
        s = s .. " ack " .. ackpsn
        if syn <= 6 then
            syn_item:add_proto_expert_info(ef.nak, string.format("%s for PSN %d", SYNDROME_NAMES[syn], nakpsn))
        end
    end
    if #sacked > 0 then s = s .. " SACK " .. ranges(sacked) end
    if high ~= ackpsn then s = s .. " high " .. high end
    s = s .. " credits " .. credits
    t:set_text("AckExt: " .. s)
    if piggybacked then t:prepend_text("Piggybacked ") end
    return s
end

-- dissect_data adds a data packet's extension (at o), its piggybacked AckExt and its payload
-- up to stop (exclusive), for a packet on its own or a Bundle entry; the caller checked
-- that the extension and AckExt lie within [o, stop). It applies the opcode's checks (§9
-- item 7) and returns the packet's summary.
local function dissect_data(tvb, tree, st, op, fl, psn, o, stop)
    local ackat = o + op.ext
    local pstart = ackat
    if band(fl, FLAG_ACK) ~= 0 then pstart = ackat + ACKEXT_LEN end
    local n = stop - pstart
    local s = op.name .. " PSN " .. psn

    if op.kind == "send" then
        local t = tree:add(f.send, tvb(o, op.ext))
        local msn, off, total, inv = tvb(o, 4):uint(), tvb(o + 4, 4):uint(), tvb(o + 8, 4):uint(), tvb(o + 12, 4):uint()
        t:add(f.send_msn, tvb(o, 4))
        local oi = t:add(f.send_offset, tvb(o + 4, 4))
        local ti = t:add(f.send_total, tvb(o + 8, 4))
        local ii = t:add(f.send_inv_token, tvb(o + 12, 4))
        t:set_text(string.format("SendExt: MSN %d, offset %d, total %d%s", msn, off, total,
            inv ~= 0 and string.format(", invalidate token 0x%08x", inv) or ""))
        s = s .. string.format(" MSN %d len %d", msn, n)
        if total ~= n or off ~= 0 then s = s .. string.format(" off %d of %d", off, total) end
        if inv ~= 0 then s = s .. string.format(" inv 0x%08x", inv) end
        local name = op.name
        local is_inv = name == "SendLastInv" or name == "SendOnlyInv"
        local first = name == "SendFirst" or name == "SendOnly" or name == "SendOnlyInv"
        if total > MAX_SEND_TOTAL then bad(st, ti, "Send Total over 2^31") end
        if is_inv and inv == 0 then bad(st, ii, name .. " with Invalidate Token 0") end
        if not is_inv and inv ~= 0 then bad(st, ii, name .. " with a non-zero Invalidate Token") end
        if first and off ~= 0 then bad(st, oi, name .. " with Offset not 0") end
        if not first and off == 0 then bad(st, oi, name .. " with Offset 0") end
        local stop_at = off + n
        if name == "SendOnly" or name == "SendOnlyInv" then
            if stop_at ~= total then bad(st, t, string.format("%s: Offset %d + payload %d != Total %d", name, off, n, total)) end
        elseif name == "SendLast" or name == "SendLastInv" then
            if n == 0 then bad(st, t, name .. " with an empty payload") end
            if stop_at ~= total then bad(st, t, string.format("%s: Offset %d + payload %d != Total %d", name, off, n, total)) end
        else
            if n == 0 then bad(st, t, name .. " with an empty payload") end
            if stop_at >= total then bad(st, t, string.format("%s: Offset %d + payload %d not below Total %d", name, off, n, total)) end
        end
    elseif op.kind == "write" or op.kind == "readreq" then
        local t = tree:add(f.rdma, tvb(o, op.ext))
        local token, length, off = tvb(o + 8, 4):uint(), tvb(o + 12, 4):uint(), tvb(o + 16, 4):uint()
        local addr = hex64(tvb, o)
        t:add(f.rdma_addr, tvb(o, 8))
        t:add(f.rdma_token, tvb(o + 8, 4))
        local li = t:add(f.rdma_length, tvb(o + 12, 4))
        local oi = t:add(f.rdma_offset, tvb(o + 16, 4))
        t:set_text(string.format("RDMAExt: address %s, token 0x%08x, length %d, offset %d", addr, token, length, off))
        if op.kind == "write" then
            s = s .. string.format(" len %d", n)
            if length ~= n or off ~= 0 then s = s .. string.format(" off %d of %d", off, length) end
            s = s .. string.format(" addr %s token 0x%08x", addr, token)
            if off + n > length then
                bad(st, t, string.format("Write: Offset %d + payload %d over Length %d", off, n, length))
            end
        else
            s = s .. string.format(" length %d addr %s token 0x%08x", length, addr, token)
            if n ~= 0 then bad(st, t, string.format("ReadRequest with %d bytes after its extension", n)) end
            if length == 0 then bad(st, li, "ReadRequest of Length 0") end
            if off ~= 0 then bad(st, oi, "ReadRequest with Offset not 0") end
        end
    else -- readresp
        local t = tree:add(f.readresp, tvb(o, op.ext))
        local req, off = tvb(o, 4):uint(), tvb(o + 4, 4):uint()
        t:add(f.rr_req_psn, tvb(o, 4))
        t:add(f.rr_offset, tvb(o + 4, 4))
        t:set_text(string.format("ReadRespExt: request PSN %d, offset %d", req, off))
        s = s .. string.format(" req %d off %d len %d", req, off, n)
        if off + n > TWO32 - 1 then bad(st, t, "ReadResponse: Offset + payload over 2^32-1") end
    end

    if band(fl, FLAG_ACK) ~= 0 then
        s = s .. " +" .. dissect_ackext(tvb, tree, st, ackat, true)
    end
    if op.kind ~= "readreq" then
        if n > 0 then
            tree:add(f.payload, tvb(pstart, n))
            tree:add(f.payload_len, tvb(pstart, n), n):set_generated()
        else
            tree:add(f.payload_len, 0):set_generated()
        end
    end
    local names = flag_names(fl)
    if names ~= "" then s = s .. " [" .. names .. "]" end
    return s
end

-- dissect_cm adds a connection-management message's CMExt (at 24) and private data, up to
-- stop, and returns its summary.
local function dissect_cm(tvb, tree, st, op, stop)
    local o = HEADER_LEN
    local t = tree:add(f.cm, tvb(o, CMEXT_LEN))
    local service = tvb(o, 8):uint64()
    local connid = hex64(tvb, o + 8)
    local srcqpn, ipsn = tvb(o + 16, 4):uint(), tvb(o + 20, 4):uint()
    local maxp, ird, ord = tvb(o + 32, 2):uint(), tvb(o + 34, 1):uint(), tvb(o + 35, 1):uint()
    local dport, reason, plen = tvb(o + 36, 2):uint(), tvb(o + 38, 2):uint(), tvb(o + 40, 2):uint()
    t:add(f.cm_service_id, tvb(o, 8))
    local ci = t:add(f.cm_conn_id, tvb(o + 8, 8))
    t:add(f.cm_src_qpn, tvb(o + 16, 4))
    t:add(f.cm_initial_psn, tvb(o + 20, 4))
    t:add(f.cm_cookie, tvb(o + 24, 8))
    t:add(f.cm_max_payload, tvb(o + 32, 2))
    t:add(f.cm_ird, tvb(o + 34, 1))
    t:add(f.cm_ord, tvb(o + 35, 1))
    t:add(f.cm_data_port, tvb(o + 36, 2))
    local rsi = t:add(f.cm_reason, tvb(o + 38, 2))
    local pli = t:add(f.cm_private_len, tvb(o + 40, 2))
    t:set_text(string.format("CMExt: service %s, connection %s, QPN %d", tostring(service), connid, srcqpn))

    local pstart = o + CMEXT_LEN
    local n = stop - pstart
    if n > 0 then tree:add(f.cm_private_data, tvb(pstart, n)) end
    if plen > MAX_PRIVATE_DATA then
        bad(st, pli, string.format("PrivateLen %d over %d", plen, MAX_PRIVATE_DATA))
    elseif n ~= plen then
        bad(st, pli, string.format("PrivateLen %d but %d bytes before the trailer", plen, n))
    end
    local name = op.name
    if (name == "ConnRequest" or name == "ConnReply" or name == "ReadyToUse" or name == "ConnReject")
        and is_zero64(tvb, o + 8) then
        bad(st, ci, name .. " with Connection ID 0")
    end

    local s = name
    if name == "ConnRequest" or name == "ConnReply" then
        s = s .. string.format(" service %s conn %s QPN %d PSN %d MaxPayload %d IRD %d ORD %d port %d",
            tostring(service), connid, srcqpn, ipsn, maxp, ird, ord, dport)
        if name == "ConnReply" then s = s .. " cookie " .. hex64(tvb, o + 24) end
    elseif name == "ReadyToUse" then
        s = s .. string.format(" conn %s QPN %d", connid, srcqpn)
    elseif name == "ConnReject" then
        s = s .. string.format(" conn %s reason %d", connid, reason)
        if REASON_NAMES[reason] then s = s .. " (" .. REASON_NAMES[reason] .. ")" end
        rsi:add_proto_expert_info(ef.reject, string.format("ConnReject reason %d: %s", reason,
            REASON_NAMES[reason] or "not defined"))
    else
        s = s .. string.format(" QPN %d", srcqpn)
    end
    if plen > 0 then s = s .. " private " .. plen end
    return s
end

-- dissect_ack adds an Ack's AckExt (at o) for an Ack on its own or a Bundle entry, whose
-- bytes end at stop; the caller checked that the AckExt fits. It flags a PSN other than 0
-- (on psn_item) and bytes after the extension (§9), and returns the Ack's summary.
local function dissect_ack(tvb, tree, st, fl, psn, psn_item, o, stop)
    local s = dissect_ackext(tvb, tree, st, o, false)
    if band(fl, FLAG_ACKREQ) ~= 0 then s = s .. " probe" end
    if psn ~= 0 then bad(st, psn_item, "Ack with PSN not 0") end
    local fixed = o + ACKEXT_LEN
    if stop > fixed then
        local it = tree:add(f.payload, tvb(fixed, stop - fixed))
        bad(st, it, string.format("Ack with %d bytes after its extension", stop - fixed))
    end
    return s
end

-- dissect_entry adds the Bundle entry at o (before stop) to tree as entry number index, its
-- DestQPN and Cookie those at qpn_at and cookie_at (the header's, or its group's), and
-- tallies it in acc. It returns the offset after the entry, or nil when the rest of the
-- datagram cannot be read as entries. The caller checked that an entry header fits.
local function dissect_entry(tvb, tree, st, o, stop, index, qpn_at, cookie_at, acc)
    local length = tvb(o, 2):uint()
    local code = tvb(o + 2, 1):uint()
    local fl = tvb(o + 3, 1):uint()
    local epsn = tvb(o + 4, 4):uint()
    local avail = stop - o - ENTRY_HEADER_LEN
    local span = ENTRY_HEADER_LEN + math.min(length, avail)
    local et = tree:add(f.entry, tvb(o, span))
    et:add(f.entry_index, index):set_generated()
    local li = et:add(f.entry_length, tvb(o, 2))
    local oi = et:add(f.opcode, tvb(o + 2, 1))
    local fi = add_flags(et, tvb(o + 3, 1), fl)
    local pi = et:add(f.psn, tvb(o + 4, 4))
    et:add(f.dest_qpn, tvb(qpn_at, 4)):set_generated()
    et:add(f.cookie, tvb(cookie_at, 8)):set_generated()
    et:add(f.ts, tvb(20, 4)):set_generated()
    local op = OPS[code]
    local summary
    if length > avail then
        bad(st, li, string.format("entry Length %d runs past the datagram (%d bytes left)", length, avail))
        summary = string.format("opcode 0x%02x, Length %d past the end", code, length)
    elseif op == nil or not (is_data(op) or op.kind == "ack") then
        bad(st, oi, string.format("opcode 0x%02x (%s) is neither a data opcode nor Ack", code, OPCODE_NAMES[code] or "unknown"))
        summary = string.format("opcode 0x%02x", code)
    else
        check_flags(st, fi, op, fl)
        local fixed = op.ext
        if band(fl, FLAG_ACK) ~= 0 then fixed = fixed + ACKEXT_LEN end
        if length < fixed then
            bad(st, li, string.format("entry Length %d shorter than its extension%s (%d)", length,
                fixed > op.ext and " and AckExt" or "", fixed))
            summary = op.name .. " PSN " .. epsn .. " (too short)"
        else
            local at, to = o + ENTRY_HEADER_LEN, o + ENTRY_HEADER_LEN + length
            if op.kind == "ack" then
                summary = dissect_ack(tvb, et, st, fl, epsn, pi, at, to)
            else
                summary = dissect_data(tvb, et, st, op, fl, epsn, at, to)
            end
            acc.counts[op.name] = (acc.counts[op.name] or 0) + 1
            if acc.names[#acc.names] ~= op.name then acc.names[#acc.names + 1] = op.name end
            if op.kind ~= "ack" then -- an Ack entry's PSN is 0, not part of the data's range
                acc.first_psn = acc.first_psn or epsn
                acc.last_psn = epsn
            end
        end
    end
    et:set_text(string.format("Entry %d: %s", index, summary))
    if length > avail then return nil end
    return o + ENTRY_HEADER_LEN + length
end

-- short_entry flags the bytes from o to stop when they are too few for an entry header and
-- reports whether they were.
local function short_entry(tvb, tree, st, o, stop)
    if stop - o >= ENTRY_HEADER_LEN then return false end
    local it = tree:add(f.payload, tvb(o, stop - o))
    bad(st, it, string.format("%d bytes after the last entry, too few for an entry header", stop - o))
    return true
end

-- entries_summary is the summary of the entries acc tallied: each opcode's count in order of
-- first appearance, then the PSNs of the first and the last (with psns).
local function entries_summary(acc, psns)
    local parts = {}
    for _, name in ipairs(acc.names) do
        if acc.counts[name] then
            parts[#parts + 1] = name .. " x" .. acc.counts[name]
            acc.counts[name] = nil
        end
    end
    local s = ""
    if #parts > 0 then s = ": " .. table.concat(parts, ", ") end
    if psns and acc.first_psn then
        s = s .. " PSN " .. acc.first_psn
        if acc.last_psn ~= acc.first_psn then s = s .. "-" .. acc.last_psn end
    end
    return s
end

-- dissect_bundle adds a Bundle's entries, from 24 up to stop, and returns its summary.
local function dissect_bundle(tvb, tree, st, hdr_item, psn, stop)
    if psn ~= 0 then bad(st, hdr_item, "Bundle with PSN not 0") end
    local o = HEADER_LEN
    local count = 0
    local acc = { names = {}, counts = {} }
    while o < stop and not short_entry(tvb, tree, st, o, stop) do
        count = count + 1
        o = dissect_entry(tvb, tree, st, o, stop, count, 4, 12, acc)
        if o == nil then break end
    end
    tree:add(f.bundle_entries, count):set_generated()
    if count == 0 then bad(st, hdr_item, "Bundle without entries") end
    return string.format("Bundle %d entr%s", count, count == 1 and "y" or "ies") .. entries_summary(acc, true)
end

-- dissect_multibundle adds a multi-QP Bundle's groups and their entries, from 24 up to stop,
-- and returns its summary.
local function dissect_multibundle(tvb, tree, st, hdr_item, psn, stop)
    if psn ~= 0 then bad(st, hdr_item, "MultiBundle with PSN not 0") end
    if tvb(4, 4):uint() ~= 0 then bad(st, hdr_item, "MultiBundle with DestQPN not 0") end
    if not is_zero64(tvb, 12) then bad(st, hdr_item, "MultiBundle with Cookie not 0") end
    local o = HEADER_LEN
    local count, groups = 0, 0
    local acc = { names = {}, counts = {} }
    local qpns = {}
    while o ~= nil and o < stop do
        if stop - o < GROUP_HEADER_LEN then
            local it = tree:add(f.payload, tvb(o, stop - o))
            bad(st, it, string.format("%d bytes after the last group, too few for a group header", stop - o))
            break
        end
        groups = groups + 1
        local gat = o
        local qpn, want = tvb(o, 4):uint(), tvb(o + 14, 2):uint()
        local gt = tree:add(f.group, tvb(o, stop - o))
        gt:add(f.group_index, groups):set_generated()
        gt:add(f.dest_qpn, tvb(o, 4))
        gt:add(f.cookie, tvb(o + 4, 8))
        gt:add(f.group_source_port, tvb(o + 12, 2))
        local ci = gt:add(f.group_count, tvb(o + 14, 2))
        if want == 0 then bad(st, ci, "group of no entry") end
        qpns[#qpns + 1] = tostring(qpn)
        o = o + GROUP_HEADER_LEN
        local n = 0
        while o ~= nil and n < want do
            if o >= stop then
                bad(st, ci, string.format("group announces %d entries, %d follow", want, n))
                break
            end
            if short_entry(tvb, gt, st, o, stop) then
                o = nil
                break
            end
            n = n + 1
            count = count + 1
            o = dissect_entry(tvb, gt, st, o, stop, count, gat, gat + 4, acc)
        end
        gt:set_len((o or stop) - gat)
        gt:set_text(string.format("Group %d: QPN %d, cookie %s, source port %d, %d entr%s", groups, qpn,
            hex64(tvb, gat + 4), tvb(gat + 12, 2):uint(), want, want == 1 and "y" or "ies"))
    end
    tree:add(f.bundle_groups, groups):set_generated()
    tree:add(f.bundle_entries, count):set_generated()
    if groups == 0 then bad(st, hdr_item, "MultiBundle without groups") end
    return string.format("MultiBundle %d entr%s in %d group%s", count, count == 1 and "y" or "ies",
        groups, groups == 1 and "" or "s") .. entries_summary(acc, false) .. " QPN " .. table.concat(qpns, ",")
end

---------------------------------------------------------------------------------------------
-- The datagram.

-- dissect decodes one datagram (tvb is the UDP payload) and returns the bytes it took.
local function dissect(tvb, pinfo, tree)
    local L = tvb:reported_len()
    local cap = tvb:len()
    pinfo.cols.protocol = "xdpndk"
    local st = new_state()
    local root = tree:add(xdpndk, tvb())
    root:add(f.length, L):set_generated()

    local function finish(summary)
        local info = summary
        if #st.problems > 0 then info = info .. " [malformed: " .. st.problems[1] .. "]" end
        if st.crc_bad then info = info .. " [bad CRC]" end
        pinfo.cols.info = info
        root:append_text(", " .. summary)
        return L
    end

    if L < HEADER_LEN + TRAILER_LEN then
        if cap > 0 then root:add(f.payload, tvb(0, cap)) end
        bad(st, root, string.format("%d bytes: shorter than a header and a trailer (28)", L))
        return finish("xdpndk")
    end
    if cap < L then
        -- A snap length cut the datagram: show the header if it is there, check nothing.
        local it = root
        if cap >= HEADER_LEN then
            local code = tvb(1, 1):uint()
            it = root:add(f.header, tvb(0, HEADER_LEN))
            it:add(f.version, tvb(0, 1))
            it:add(f.opcode, tvb(1, 1))
            add_flags(it, tvb(2, 2), tvb(2, 2):uint())
            it:add(f.dest_qpn, tvb(4, 4))
            it:add(f.psn, tvb(8, 4))
            it:add(f.cookie, tvb(12, 8))
            it:add(f.ts, tvb(20, 4))
            it:set_text("Header: " .. (OPCODE_NAMES[code] or string.format("opcode 0x%02x", code)))
            pinfo.cols.info = (OPCODE_NAMES[code] or "xdpndk") .. string.format(" (captured %d of %d bytes)", cap, L)
        else
            pinfo.cols.info = string.format("xdpndk (captured %d of %d bytes)", cap, L)
        end
        root:add_proto_expert_info(ef.truncated, string.format("captured %d of %d bytes: not decoded further, CRC not verified", cap, L))
        return L
    end

    local stop = L - TRAILER_LEN -- end of the payload
    local version = tvb(0, 1):uint()
    local code = tvb(1, 1):uint()
    local fl = tvb(2, 2):uint()
    local psn = tvb(8, 4):uint()
    local op = OPS[code]

    local h = root:add(f.header, tvb(0, HEADER_LEN))
    local vi = h:add(f.version, tvb(0, 1))
    local oi = h:add(f.opcode, tvb(1, 1))
    local fi = add_flags(h, tvb(2, 2), fl)
    h:add(f.dest_qpn, tvb(4, 4))
    h:add(f.psn, tvb(8, 4))
    h:add(f.cookie, tvb(12, 8))
    h:add(f.ts, tvb(20, 4))
    h:set_text(string.format("Header: %s, flags 0x%04x, QPN %d, PSN %d, cookie %s, TS %d",
        OPCODE_NAMES[code] or string.format("opcode 0x%02x", code), fl, tvb(4, 4):uint(), psn,
        hex64(tvb, 12), tvb(20, 4):uint()))
    if band(fl, FLAG_RETRANSMIT) ~= 0 then fi:add_proto_expert_info(ef.retransmit) end

    local summary
    if version ~= 1 then
        bad(st, vi, string.format("version %d, not 1", version))
        summary = string.format("xdpndk version %d", version)
        if stop > HEADER_LEN then root:add(f.payload, tvb(HEADER_LEN, stop - HEADER_LEN)) end
    elseif op == nil then
        bad(st, oi, string.format("opcode 0x%02x is not defined", code))
        summary = string.format("Opcode 0x%02x", code)
        if stop > HEADER_LEN then root:add(f.payload, tvb(HEADER_LEN, stop - HEADER_LEN)) end
    else
        check_flags(st, fi, op, fl)
        local fixed = HEADER_LEN + op.ext
        if is_data(op) and band(fl, FLAG_ACK) ~= 0 then fixed = fixed + ACKEXT_LEN end
        if stop < fixed then
            bad(st, root, string.format("%d bytes: too short for %s's header, extension%s and trailer (%d)",
                L, op.name, fixed > HEADER_LEN + op.ext and ", AckExt" or "", fixed + TRAILER_LEN))
            summary = op.name .. " (too short)"
            if stop > HEADER_LEN then root:add(f.payload, tvb(HEADER_LEN, stop - HEADER_LEN)) end
        elseif is_data(op) then
            summary = dissect_data(tvb, root, st, op, fl, psn, HEADER_LEN, stop)
        elseif op.kind == "ack" then
            summary = dissect_ack(tvb, root, st, fl, psn, h, HEADER_LEN, stop)
        elseif op.kind == "cm" then
            summary = dissect_cm(tvb, root, st, op, stop)
            if band(fl, FLAG_RETRANSMIT) ~= 0 then summary = summary .. " [Retransmit]" end
        elseif op.kind == "multibundle" then
            summary = dissect_multibundle(tvb, root, st, h, psn, stop)
        else
            summary = dissect_bundle(tvb, root, st, h, psn, stop)
        end
    end

    -- The trailer.
    local ci = root:add(f.crc, tvb(stop, TRAILER_LEN))
    if xdpndk.prefs.check_crc and CRC_SELF_CHECK then
        local want = tvb(stop, TRAILER_LEN):uint()
        local got = crc32c(tvb:raw(0, stop))
        ci:add(f.crc_computed, tvb(stop, TRAILER_LEN), got):set_generated()
        if got == want then
            ci:append_text(" [correct]")
            ci:add(f.crc_status, tvb(stop, TRAILER_LEN), 1):set_generated()
        else
            ci:append_text(string.format(" [incorrect, should be 0x%08x]", got))
            ci:add(f.crc_status, tvb(stop, TRAILER_LEN), 0):set_generated()
            ci:add_proto_expert_info(ef.crc_bad, string.format("CRC32C 0x%08x, computed 0x%08x", want, got))
            st.crc_bad = true
        end
    else
        ci:add(f.crc_status, tvb(stop, TRAILER_LEN), 2):set_generated()
        ci:add_proto_expert_info(ef.crc_unverified, CRC_SELF_CHECK and "verification is off (preference)"
            or "this Lua's CRC-32C failed its self-check (123456789 -> 0xE3069283): not verified")
    end
    return finish(summary)
end

function xdpndk.dissector(tvb, pinfo, tree)
    return dissect(tvb, pinfo, tree)
end

-- The heuristic, for captures on another port: version 1, a defined opcode, and a CRC32C
-- trailer that matches (a chance of 2^-32 for anything else).
local function heuristic(tvb, pinfo, tree)
    if not xdpndk.prefs.heuristic then return false end
    local L = tvb:reported_len()
    if L < HEADER_LEN + TRAILER_LEN or tvb:len() < L then return false end
    if tvb(0, 1):uint() ~= 1 or OPS[tvb(1, 1):uint()] == nil then return false end
    if not CRC_SELF_CHECK or crc32c(tvb:raw(0, L - TRAILER_LEN)) ~= tvb(L - TRAILER_LEN, TRAILER_LEN):uint() then
        return false
    end
    dissect(tvb, pinfo, tree)
    return true
end
xdpndk:register_heuristic("udp", heuristic)

---------------------------------------------------------------------------------------------
-- The port.

local udp_port = DissectorTable.get("udp.port")
local registered_port = 0

local function register_port(port)
    if port > 65535 then port = 0 end
    if port == registered_port then return end
    if registered_port ~= 0 then udp_port:remove(registered_port, xdpndk) end
    if port ~= 0 then udp_port:add(port, xdpndk) end
    registered_port = port
end

register_port(DEFAULT_PORT)
pcall(function() udp_port:add_for_decode_as(xdpndk) end)

function xdpndk.prefs_changed()
    register_port(xdpndk.prefs.port)
end
