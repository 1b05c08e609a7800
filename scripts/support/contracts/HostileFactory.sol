// SPDX-License-Identifier: MIT
pragma solidity ^0.8.27;

// What an attacker can make an ERC-6492 signature carry. The signature names a factory and the call
// that deploys the "wallet"; the validator the service runs in its eth_call makes that call, then
// asks the new account `isValidSignature`. These accounts make that question expensive to answer:
// one reverts with as much data as the call's gas can pay for, the other never stops working.
//
// Only the tests use these contracts (scripts/support/evm-contracts.ts compiles them with solc-js and
// deploys the factory on a local anvil chain); nothing here is deployed anywhere.

/// `isValidSignature` reverts with `revertBytes` zero bytes, or (0) spends all the gas it is given.
contract HostileAccount {
    uint256 private immutable revertBytes;

    constructor(uint256 size) {
        revertBytes = size;
    }

    function isValidSignature(bytes32, bytes calldata) external view returns (bytes4) {
        uint256 size = revertBytes;
        if (size > 0) {
            assembly {
                revert(0, size)
            }
        }
        // Hashing in scratch space (no memory growth, so gas buys time linearly) until out of gas.
        assembly {
            let digest := 0
            for {} 1 {} {
                mstore(0, digest)
                digest := keccak256(0, 32)
            }
        }
        return 0;
    }
}

/// Deploys HostileAccounts at addresses known in advance (CREATE2), as ERC-6492 factories do.
contract HostileFactory {
    function accountAddress(uint256 revertBytes, bytes32 salt) public view returns (address) {
        bytes32 code = keccak256(abi.encodePacked(type(HostileAccount).creationCode, abi.encode(revertBytes)));
        return address(uint160(uint256(keccak256(abi.encodePacked(bytes1(0xff), address(this), salt, code)))));
    }

    function createAccount(uint256 revertBytes, bytes32 salt) external returns (address account) {
        account = accountAddress(revertBytes, salt);
        if (account.code.length == 0) new HostileAccount{salt: salt}(revertBytes);
    }
}
